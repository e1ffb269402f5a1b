// Behavioural model of the Lattice ECP5 MULT18X18D (18x18 multiplier of a sysDSP slice), for
// simulating RTL that instantiates the cell (hw/fp/mul.py with dsp="ecp5") in Verilator.
//
// Yosys 0.70 ships MULT18X18D only as a blackbox (share/ecp5/cells_bb.v, whose port list and
// parameter defaults this module repeats); its cells_sim.v has no model of it. Written from the
// documented architecture (Lattice TN1267, ECP5 sysDSP Usage Guide):
//
//   A, B, C --[input registers]--> multiplier --[pipeline register]--[output register]--> P
//
// Each register is present when its REG_*_CLK parameter names a clock (CLK0..CLK3) and is
// bypassed when it is "NONE"; REG_*_CE and REG_*_RST pick its clock enable (CE0..CE3, active
// high) and reset (RST0..RST3, active high, synchronous or asynchronous by RESETMODE, clearing
// to 0). SIGNEDA/SIGNEDB travel through the input registers with their operands and select a
// two's complement operand; SIGNEDP says the product is signed. ROA/ROB/ROC and SROA/SROB give
// the registered operands (cascade and ALU54B connections). Registers start at 0.
//
// Modelled subset, checked at time 0 and on every clock edge: parallel operands only
// (SOURCEA = SOURCEB = 0, so SRIA/SRIB and SOURCEB_MODE are unused), MULT_BYPASS "DISABLED",
// HIGHSPEED_CLK "NONE", CAS_MATCH_REG "FALSE". Not modelled: the global set/reset (GSR) and the
// CLKn_DIV options, which do not change what a register holds in a functional simulation.
//
// Lint waivers for this file (unused inputs and parameters of the unmodelled modes, string
// parameter comparisons) are in sim/verilator/ecp5_cells.vlt; pass both to the build.

`default_nettype none

module MULT18X18D (
    input  wire A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2, A1, A0,
    input  wire B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2, B1, B0,
    input  wire C17, C16, C15, C14, C13, C12, C11, C10, C9, C8, C7, C6, C5, C4, C3, C2, C1, C0,
    input  wire SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    input  wire CLK3, CLK2, CLK1, CLK0,
    input  wire CE3, CE2, CE1, CE0,
    input  wire RST3, RST2, RST1, RST0,
    // Shift inputs: only read in the unmodelled SOURCEA/SOURCEB = 1 modes.
    input  wire SRIA17, SRIA16, SRIA15, SRIA14, SRIA13, SRIA12, SRIA11, SRIA10, SRIA9,
                SRIA8, SRIA7, SRIA6, SRIA5, SRIA4, SRIA3, SRIA2, SRIA1, SRIA0,
    input  wire SRIB17, SRIB16, SRIB15, SRIB14, SRIB13, SRIB12, SRIB11, SRIB10, SRIB9,
                SRIB8, SRIB7, SRIB6, SRIB5, SRIB4, SRIB3, SRIB2, SRIB1, SRIB0,
    output wire SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9,
                SROA8, SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0,
    output wire SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9,
                SROB8, SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0,
    output wire ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9,
                ROA8, ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0,
    output wire ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9,
                ROB8, ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0,
    output wire ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9,
                ROC8, ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0,
    output wire P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24,
                P23, P22, P21, P20, P19, P18, P17, P16, P15, P14, P13, P12,
                P11, P10, P9, P8, P7, P6, P5, P4, P3, P2, P1, P0,
    output wire SIGNEDP
);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_INPUTC_CLK = "NONE";
    parameter REG_INPUTC_CE = "CE0";
    parameter REG_INPUTC_RST = "RST0";
    parameter REG_PIPELINE_CLK = "NONE";
    parameter REG_PIPELINE_CE = "CE0";
    parameter REG_PIPELINE_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter CLK0_DIV = "ENABLED";
    parameter CLK1_DIV = "ENABLED";
    parameter CLK2_DIV = "ENABLED";
    parameter CLK3_DIV = "ENABLED";
    parameter HIGHSPEED_CLK = "NONE";
    parameter GSR = "ENABLED";
    parameter CAS_MATCH_REG = "FALSE";
    parameter SOURCEB_MODE = "B_SHIFT";
    parameter MULT_BYPASS = "DISABLED";
    parameter RESETMODE = "SYNC";

    wire [3:0] clk = {CLK3, CLK2, CLK1, CLK0};
    wire [3:0] ce = {CE3, CE2, CE1, CE0};
    wire [3:0] rst = {RST3, RST2, RST1, RST0};

    initial begin
        if (MULT_BYPASS != "DISABLED" || HIGHSPEED_CLK != "NONE" || CAS_MATCH_REG != "FALSE")
            $fatal(1, "%m: MULT18X18D model: only MULT_BYPASS=DISABLED, HIGHSPEED_CLK=NONE and %s",
                   "CAS_MATCH_REG=FALSE are modelled");
        if (RESETMODE != "SYNC" && RESETMODE != "ASYNC")
            $fatal(1, "%m: MULT18X18D model: RESETMODE must be SYNC or ASYNC");
    end
    always @(posedge CLK0 or posedge CLK1 or posedge CLK2 or posedge CLK3)
        if (SOURCEA || SOURCEB)
            $fatal(1, "%m: MULT18X18D model: only SOURCEA = SOURCEB = 0 is modelled");

    // Input registers: {signed, operand}.
    wire [18:0] a_q, b_q;
    wire [17:0] c_q;
    MULT18X18D__register #(.WIDTH(19), .CLK(REG_INPUTA_CLK), .CE(REG_INPUTA_CE),
                           .RST(REG_INPUTA_RST), .RESETMODE(RESETMODE))
        input_a (.clk(clk), .ce(ce), .rst(rst),
                 .d({SIGNEDA, A17, A16, A15, A14, A13, A12, A11, A10, A9,
                     A8, A7, A6, A5, A4, A3, A2, A1, A0}), .q(a_q));
    MULT18X18D__register #(.WIDTH(19), .CLK(REG_INPUTB_CLK), .CE(REG_INPUTB_CE),
                           .RST(REG_INPUTB_RST), .RESETMODE(RESETMODE))
        input_b (.clk(clk), .ce(ce), .rst(rst),
                 .d({SIGNEDB, B17, B16, B15, B14, B13, B12, B11, B10, B9,
                     B8, B7, B6, B5, B4, B3, B2, B1, B0}), .q(b_q));
    MULT18X18D__register #(.WIDTH(18), .CLK(REG_INPUTC_CLK), .CE(REG_INPUTC_CE),
                           .RST(REG_INPUTC_RST), .RESETMODE(RESETMODE))
        input_c (.clk(clk), .ce(ce), .rst(rst),
                 .d({C17, C16, C15, C14, C13, C12, C11, C10, C9,
                     C8, C7, C6, C5, C4, C3, C2, C1, C0}), .q(c_q));

    // The product, modulo 2**36, of the operands extended to 36 bits (sign-extended when
    // signed): exact for every signedness, since every product fits 36 bits.
    wire [35:0] a_ext = {{18{a_q[18] & a_q[17]}}, a_q[17:0]};
    wire [35:0] b_ext = {{18{b_q[18] & b_q[17]}}, b_q[17:0]};
    // Only the low 36 bits of the 72-bit product are the result.
    wire [71:0] product = {36'b0, a_ext} * {36'b0, b_ext};

    // Pipeline and output registers: {signed, product}.
    wire [36:0] pipeline_q, output_q;
    MULT18X18D__register #(.WIDTH(37), .CLK(REG_PIPELINE_CLK), .CE(REG_PIPELINE_CE),
                           .RST(REG_PIPELINE_RST), .RESETMODE(RESETMODE))
        pipeline (.clk(clk), .ce(ce), .rst(rst), .d({a_q[18] | b_q[18], product[35:0]}),
                  .q(pipeline_q));
    MULT18X18D__register #(.WIDTH(37), .CLK(REG_OUTPUT_CLK), .CE(REG_OUTPUT_CE),
                           .RST(REG_OUTPUT_RST), .RESETMODE(RESETMODE))
        output_ (.clk(clk), .ce(ce), .rst(rst), .d(pipeline_q), .q(output_q));

    assign {SIGNEDP, P35, P34, P33, P32, P31, P30, P29, P28, P27,
            P26, P25, P24, P23, P22, P21, P20, P19, P18, P17,
            P16, P15, P14, P13, P12, P11, P10, P9, P8, P7,
            P6, P5, P4, P3, P2, P1, P0} = output_q;
    assign {ROA17, ROA16, ROA15, ROA14, ROA13, ROA12, ROA11, ROA10, ROA9, ROA8,
            ROA7, ROA6, ROA5, ROA4, ROA3, ROA2, ROA1, ROA0} = a_q[17:0];
    assign {ROB17, ROB16, ROB15, ROB14, ROB13, ROB12, ROB11, ROB10, ROB9, ROB8,
            ROB7, ROB6, ROB5, ROB4, ROB3, ROB2, ROB1, ROB0} = b_q[17:0];
    assign {ROC17, ROC16, ROC15, ROC14, ROC13, ROC12, ROC11, ROC10, ROC9, ROC8,
            ROC7, ROC6, ROC5, ROC4, ROC3, ROC2, ROC1, ROC0} = c_q;
    assign {SROA17, SROA16, SROA15, SROA14, SROA13, SROA12, SROA11, SROA10, SROA9, SROA8,
            SROA7, SROA6, SROA5, SROA4, SROA3, SROA2, SROA1, SROA0} = a_q[17:0];
    assign {SROB17, SROB16, SROB15, SROB14, SROB13, SROB12, SROB11, SROB10, SROB9, SROB8,
            SROB7, SROB6, SROB5, SROB4, SROB3, SROB2, SROB1, SROB0} = b_q[17:0];
endmodule

// One register of MULT18X18D, or a wire when CLK is "NONE". CLK, CE and RST name one of the
// four clock, enable and reset inputs of the cell ("CLK0".."CLK3", "CE0".."CE3", "RST0".."RST3").
module MULT18X18D__register #(
    parameter integer WIDTH = 1,
    parameter CLK = "NONE",
    parameter CE = "CE0",
    parameter RST = "RST0",
    parameter RESETMODE = "SYNC"
) (
    // Each register uses one of the four clocks, enables and resets.
    input  wire [3:0] clk,
    input  wire [3:0] ce,
    input  wire [3:0] rst,
    input  wire [WIDTH-1:0] d,
    output wire [WIDTH-1:0] q
);
    localparam integer CLK_INDEX = CLK == "CLK0" ? 0 : CLK == "CLK1" ? 1 : CLK == "CLK2" ? 2 :
                                   CLK == "CLK3" ? 3 : -1;
    localparam integer CE_INDEX = CE == "CE0" ? 0 : CE == "CE1" ? 1 : CE == "CE2" ? 2 :
                                  CE == "CE3" ? 3 : -1;
    localparam integer RST_INDEX = RST == "RST0" ? 0 : RST == "RST1" ? 1 : RST == "RST2" ? 2 :
                                   RST == "RST3" ? 3 : -1;

    generate
        if (CLK == "NONE") begin : bypass
            assign q = d;
        end else if (CLK_INDEX < 0 || CE_INDEX < 0 || RST_INDEX < 0) begin : invalid
            initial $fatal(1, "%m: MULT18X18D model: unknown register clock, enable or reset");
            assign q = d;
        end else begin : registered
            reg [WIDTH-1:0] r;
            initial r = {WIDTH{1'b0}};
            wire clock = clk[CLK_INDEX];
            wire enable = ce[CE_INDEX];
            wire reset = rst[RST_INDEX];
            if (RESETMODE == "ASYNC") begin : async_reset
                always @(posedge clock or posedge reset)
                    if (reset) r <= {WIDTH{1'b0}};
                    else if (enable) r <= d;
            end else begin : sync_reset
                always @(posedge clock)
                    if (reset) r <= {WIDTH{1'b0}};
                    else if (enable) r <= d;
            end
            assign q = r;
        end
    endgenerate
endmodule

`default_nettype wire
