// Line memory of the simulation-only memory models (sim/line_ram.py), used in place of an
// Amaranth memory in emitted Verilog: an Amaranth memory carries its initial contents as a
// constant (minutes of emission and megabytes of Verilog for a 4 MiB model); here the
// contents start at zero in a runtime loop.
//
// Ports (all on clk's rising edge, Amaranth lib.memory semantics):
//   w0: byte-enabled write; w1, w2: whole-line writes; on the same line in one cycle the
//       later port wins (Yosys' declaration-order priority, as lib.memory gives).
//   r0..r2: synchronous reads (data the cycle after en); R<k>_TRANSPARENT = 1 makes read
//       port k see w0's bytes written in the same cycle, as transparent_for=(w0,) does.
module trainingcxl_line_ram #(
    parameter DEPTH = 1024,
    parameter ADDR_WIDTH = 10,
    parameter R0_TRANSPARENT = 0,
    parameter R1_TRANSPARENT = 0,
    parameter R2_TRANSPARENT = 0
) (
    input  wire                  clk,
    input  wire [ADDR_WIDTH-1:0] w0_addr,
    input  wire [63:0]           w0_en,
    input  wire [511:0]          w0_data,
    input  wire [ADDR_WIDTH-1:0] w1_addr,
    input  wire                  w1_en,
    input  wire [511:0]          w1_data,
    input  wire [ADDR_WIDTH-1:0] w2_addr,
    input  wire                  w2_en,
    input  wire [511:0]          w2_data,
    input  wire [ADDR_WIDTH-1:0] r0_addr,
    input  wire                  r0_en,
    output reg  [511:0]          r0_data,
    input  wire [ADDR_WIDTH-1:0] r1_addr,
    input  wire                  r1_en,
    output reg  [511:0]          r1_data,
    input  wire [ADDR_WIDTH-1:0] r2_addr,
    input  wire                  r2_en,
    output reg  [511:0]          r2_data
);
    reg [511:0] lines [0:DEPTH-1];
    integer i;

    initial begin
        for (i = 0; i < DEPTH; i = i + 1) lines[i] = 512'd0;
        r0_data = 512'd0;
        r1_data = 512'd0;
        r2_data = 512'd0;
    end

    function automatic [511:0] seen(input [511:0] stored, input [ADDR_WIDTH-1:0] addr,
                                    input transparent);
        integer b;
        begin
            seen = stored;
            if (transparent && addr == w0_addr)
                for (b = 0; b < 64; b = b + 1)
                    if (w0_en[b]) seen[b * 8 +: 8] = w0_data[b * 8 +: 8];
        end
    endfunction

    always @(posedge clk) begin
        if (r0_en) r0_data <= seen(lines[r0_addr], r0_addr, R0_TRANSPARENT != 0);
        if (r1_en) r1_data <= seen(lines[r1_addr], r1_addr, R1_TRANSPARENT != 0);
        if (r2_en) r2_data <= seen(lines[r2_addr], r2_addr, R2_TRANSPARENT != 0);
        for (i = 0; i < 64; i = i + 1)
            if (w0_en[i]) lines[w0_addr][i * 8 +: 8] <= w0_data[i * 8 +: 8];
        if (w1_en) lines[w1_addr] <= w1_data;
        if (w2_en) lines[w2_addr] <= w2_data;
    end
endmodule
