"""Intel/Altera Agilex 7 FPGA I-Series Development Kit (AGIB027R29A1E2VR3), Quartus Prime Pro.

Agilex 7 is the family of Intel's CXL R-Tile, the FPGA a TrainingCXL device would use today.

Amaranth 0.5's :class:`AlteraPlatform` targets Quartus Prime *Standard* (Cyclone, Arria,
Stratix V) and needs three changes for Agilex, which only Quartus Prime *Pro* supports:

- synthesis is ``quartus_syn`` (Quartus Pro has no ``quartus_map``);
- the ``altiobuf_*`` megafunctions Amaranth instantiates for I/O do not exist for Agilex, so
  I/O buffers are left for Quartus to infer from plain Verilog;
- the ``.sdc`` file is named in the ``.qsf`` (Quartus Pro does not pick it up by name), and
  the board's power-management (SmartVID) settings are added; without them a "V"-suffix
  device does not configure.

Pins and settings are those of Intel's Open FPGA Stack for this kit (OFS
``ofs-agx7-pcie-attach``, ``syn/board/iseries-dk/setup/top_loc.tcl`` and
``syn/board/iseries-dk/syn_top/ofs_top.qsf``):

============== ======== ============================== =========================================
Resource       Ball     I/O standard                   OFS net
============== ======== ============================== =========================================
clk100 0       N45      TRUE DIFFERENTIAL SIGNALING    SYS_REFCLK, 100 MHz (p side; Quartus
                                                       places the n side itself)
led 0 .. 3     D44 H44  1.2 V                          qsfpa_act_g, qsfpa_speed_g,
               B41 J41                                 qsfpb_act_g, qsfpb_speed_g (QSFP-DD cage
                                                       LEDs, the only fabric-driven LEDs OFS
                                                       uses; polarity assumed active high)
============== ======== ============================== =========================================

The kit's UARTs belong to the HPS and the board management controller; no fabric pin reaches
a UART in OFS, so the self-test reports on the LEDs only (``BISTBoardTop`` skips the UART).
"""

from amaranth.build import Attrs, Clock, Pins, Resource
from amaranth.lib import io
from amaranth.vendor import AlteraPlatform

__all__ = ["Agilex7IPlatform"]


_QSF_ADDITIONS = r"""
            set_global_assignment -name FAMILY "Agilex 7"
            set_global_assignment -name SDC_FILE {{name}}.sdc
            set_global_assignment -name STRATIX_DEVICE_IO_STANDARD "1.2 V"
            # Power management and configuration, as in OFS's ofs_top.qsf for this kit.
            set_global_assignment -name VID_OPERATION_MODE "PMBUS MASTER"
            set_global_assignment -name USE_PWRMGT_SCL SDM_IO0
            set_global_assignment -name USE_PWRMGT_SDA SDM_IO12
            set_global_assignment -name USE_CONF_DONE SDM_IO16
            set_global_assignment -name PWRMGT_BUS_SPEED_MODE "100 KHZ"
            set_global_assignment -name PWRMGT_SLAVE_DEVICE_TYPE OTHER
            set_global_assignment -name PWRMGT_SLAVE_DEVICE0_ADDRESS 47
            set_global_assignment -name PWRMGT_TRANSLATED_VOLTAGE_VALUE_UNIT VOLTS
            set_global_assignment -name PWRMGT_PAGE_COMMAND_ENABLE OFF
            set_global_assignment -name PWRMGT_VOLTAGE_OUTPUT_FORMAT "LINEAR FORMAT"
            set_global_assignment -name PWRMGT_LINEAR_FORMAT_N "-12"
            set_global_assignment -name STRATIXV_CONFIGURATION_SCHEME "AVST X8"
            set_global_assignment -name DEVICE_INITIALIZATION_CLOCK OSC_CLK_1_125MHZ
"""


class _InferredBuffer(io.Buffer):
    # io.Buffer's own netlist (a plain Verilog port with an output enable), which Quartus Pro
    # maps to the Agilex I/O cells itself.
    def elaborate(self, platform):
        return super().elaborate(None)


class Agilex7IPlatform(AlteraPlatform):
    # Ordering code AGIB027R29A1E2VR3: device AGIB027, package R29A, speed grade 1E2V
    # (transceiver grade 1, extended temperature, core grade 2, SmartVID), revision R3.
    device = "AGIB027"
    package = "R29A"
    speed = "1E2V"
    suffix = "R3"
    default_clk = "clk100"
    resources = (
        Resource("clk100", 0, Pins("N45", dir="i"), Clock(100e6),
                 Attrs(IO_STANDARD="TRUE DIFFERENTIAL SIGNALING",
                       INPUT_TERMINATION="DIFFERENTIAL")),
        *[Resource("led", number, Pins(ball, dir="o"), Attrs(IO_STANDARD="1.2 V"))
          for number, ball in enumerate(("D44", "H44", "B41", "J41"))],
    )
    connectors = ()

    quartus_required_tools = ("quartus_syn", "quartus_fit", "quartus_asm", "quartus_sta")

    def __init__(self):
        super().__init__(toolchain="Quartus")

    @property
    def file_templates(self):
        templates = dict(super().file_templates)
        templates["{{name}}.qsf"] = templates["{{name}}.qsf"] + _QSF_ADDITIONS
        return templates

    @property
    def command_templates(self):
        # Quartus Pro: quartus_syn replaces quartus_map, with the same arguments.
        return [template.replace('invoke_tool("quartus_map")', 'invoke_tool("quartus_syn")')
                        .replace('get_override("quartus_map_opts")',
                                 'get_override("quartus_syn_opts")')
                for template in super().command_templates]

    def get_io_buffer(self, buffer):
        if isinstance(buffer, io.Buffer):
            result = _InferredBuffer(buffer.direction, buffer.port)
        elif isinstance(buffer, io.FFBuffer):
            # io.FFBuffer's own netlist: registers around an io.Buffer (inferred above).
            return io.FFBuffer.elaborate(buffer, None)
        else:
            raise TypeError(f"Agilex 7 supports io.Buffer and io.FFBuffer here, not "
                            f"{buffer!r}")
        if buffer.direction is not io.Direction.Output:
            result.i = buffer.i
        if buffer.direction is not io.Direction.Input:
            result.o = buffer.o
            result.oe = buffer.oe
        return result
