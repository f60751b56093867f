// qmx_dpi.sv: qmx-sim's reference conversions inside a SystemVerilog bench, through the C ABI
// (lib/include/qmx/qmx_c.h) of libqmx_c.so. Link the simulation with -lqmx_c (rtl/README.md).
//
// Names are qmx-sim's: formats as `qmx-sim formats` lists them (e4m3, e5m2, e2m1, e4m3fnuz, fp32, fp16,
// bf16, eXmY[:...], binaryKpP..), roundings rne rna rz ru rd ro sr-a sr-b sr-c, saturations satfinite
// nosat satpropagate; "" keeps the library's default. Flags use TestFloat's bits: 0x01 inexact,
// 0x02 underflow, 0x04 overflow, 0x10 invalid, 0x20 saturated.
package qmx_dpi;

  import "DPI-C" function int qmx_abi_version();
  import "DPI-C" function string qmx_last_error();
  // One conversion by the reference routine: the bits of a value of src_format into dst_format. Returns 0,
  // or a nonzero status with qmx_last_error() naming the problem.
  import "DPI-C" function int qmx_convert_named(input string src_format, input longint unsigned x_bits,
                                                input string dst_format, input string rounding,
                                                input string saturation, input string nan_sign,
                                                input string nan_fallback, input string subnormals,
                                                input int unsigned random_bits,
                                                output longint unsigned code, output int unsigned flags);

  // The same with the options as a golden file's header writes them ("round=rne sat=satfinite tininess=after");
  // the header line itself may be passed (its op, src, dst, spec, level, seed and generator keys are skipped).
  import "DPI-C" function int qmx_convert_keys(input string src_format, input longint unsigned x_bits,
                                               input string dst_format, input string options,
                                               input int unsigned random_bits,
                                               output longint unsigned code, output int unsigned flags);

  // The expected code and flags of a value (src_format's bits in x) under a rounding and saturation mode,
  // with the library's other defaults (NaN sign kept, subnormals kept); $fatal on a name the library
  // refuses.
  function automatic void qmx_expect(input string src_format, input string dst_format, input string rounding,
                                     input string saturation, input longint unsigned x, output longint unsigned code,
                                     output int unsigned flags);
    if (qmx_convert_named(src_format, x, dst_format, rounding, saturation, "", "", "", 0, code, flags) != 0)
      $fatal(1, "qmx_dpi: %s", qmx_last_error());
  endfunction

  // The expected E4M3 code and flags of an FP32 input (OCP OFP8; rne, satfinite unless asked otherwise).
  function automatic void qmx_expect_e4m3(input bit [31:0] x, input string rounding, input string saturation,
                                          output bit [7:0] code, output bit [7:0] flags);
    longint unsigned c;
    int unsigned f;
    qmx_expect("fp32", "e4m3", rounding, saturation, {32'b0, x}, c, f);
    code = c[7:0];
    flags = f[7:0];
  endfunction

  // UE8M0 scales and MX blocks (qmx_c.h qmx_ue8m0_scale, qmx_mx_blocks). FP32 values travel as their bits
  // (int unsigned, the C side's float array), so NaN payloads and -0 arrive as they are; opt null: the
  // default cast options (RNE, satfinite), the golden mx-block files' (round=rne sat=satfinite).
  import "DPI-C" function int qmx_ue8m0_scale(input shortreal amax, input string elem, input string rule,
                                              output byte unsigned scale);
  import "DPI-C" function int qmx_mx_blocks(input int unsigned x_bits[32], input longint unsigned n, input string elem,
                                            input string rule, input string nan_policy, input string scaling,
                                            input longint unsigned block, input chandle opt,
                                            output byte unsigned codes[32], output byte unsigned scales[1]);

  // One MX block of 32 FP32 values (bits) as qmx::QuantizeMx makes it: its UE8M0 scale byte and 32 element
  // codes, element 0 first, under a scale rule (ocp-floor round-up ceil even max-finite), a NaN policy
  // (block-nan scale-nan te ignore-nan ignore) and element scaling (exact fp32 te-rcp), as an mx-block golden
  // file's header names them; $fatal on a name the library refuses.
  function automatic void qmx_expect_mx_block(input bit [31:0] x[32], input string elem, input string rule,
                                              input string nan_policy, input string scaling, output bit [7:0] scale,
                                              output bit [7:0] codes[32]);
    int unsigned v[32];
    byte unsigned c[32], s[1];
    foreach (x[j]) v[j] = x[j];
    if (qmx_mx_blocks(v, 32, elem, rule, nan_policy, scaling, 32, null, c, s) != 0)
      $fatal(1, "qmx_dpi: %s", qmx_last_error());
    scale = s[0];
    foreach (c[j]) codes[j] = c[j];
  endfunction

endpackage
