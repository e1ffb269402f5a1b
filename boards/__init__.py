"""FPGA flow of TrainingCXL: per-block Fmax/utilisation figures, board builds and build plans.

Modules, one job each:

- :mod:`boards.toolchain`      environment that selects the YoWASP open toolchain.
- :mod:`boards.nextpnr_report` reads nextpnr's ``--report`` JSON into a small summary.
- :mod:`boards.build`          runs a platform build and writes ``summary.json``.
- :mod:`boards.tables`         renders summaries as a Markdown table.
- :mod:`boards.ecp5_pins`      user I/O pins of the LFE5U-85F in the CABGA381 package.
- :mod:`boards.harness`        wraps an isolated component so every signature member reaches pins.
- :mod:`boards.block_platform` a bare ECP5-85F platform whose resources come from a harness.
- :mod:`boards.blocks`         registry of named blocks and ``python -m boards.blocks``.
- :mod:`boards.clocking`       a ``sync`` clock no faster than a design closes timing at.
- :mod:`boards.bist`           built-in self-test board top (ROM-driven checks, LEDs, UART).
- :mod:`boards.platforms`      board registry: ULX3S, ECPIX-5, Alveo U200, Agilex 7 I-series.
- :mod:`boards.synth`          ``python -m boards.synth --board NAME``.
"""
