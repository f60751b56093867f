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

  // The C ABI version this package's imports match (qmx_c.h QMX_C_ABI_VERSION: 4 added qmx_dot and the _bits
  // forms). qmx_check_abi() stops the simulation when the loaded libqmx_c.so is another.
  localparam int QMX_DPI_ABI_VERSION = 4;
  function automatic void qmx_check_abi();
    if (qmx_abi_version() != QMX_DPI_ABI_VERSION)
      $fatal(1, "libqmx_c ABI version %0d, this package expects %0d", qmx_abi_version(), QMX_DPI_ABI_VERSION);
  endfunction
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

  // UE8M0 scales and MX blocks (qmx_c.h qmx_ue8m0_scale_bits, qmx_mx_blocks). FP32 values travel as their
  // bits (int unsigned; an array of them is the C side's float array), so NaN payloads and -0 arrive as they
  // are; never as shortreal, which Verilator passes as a C double. opt null: the default cast options (RNE,
  // satfinite), the golden mx-block files' (round=rne sat=satfinite).
  import "DPI-C" function int qmx_ue8m0_scale_bits(input int unsigned amax_bits, input string elem, input string rule,
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

  // NVFP4 blocks with a given tensor amax (qmx_c.h qmx_nvfp4_blocks_bits: Transformer Engine's and torchao's
  // orders, rules nvfp4 nvfp4-div nvfp4-torchao nvfp4-torchao-cuda ...), FP32 values as their bits; opt null:
  // the default cast options (rne, satfinite).
  import "DPI-C" function int qmx_nvfp4_blocks_bits(input int unsigned x_bits[16], input longint unsigned rows,
                                                    input longint unsigned cols, input int unsigned tensor_amax_bits,
                                                    input string rule, input longint unsigned block, input chandle opt,
                                                    output byte unsigned codes[16], output byte unsigned scales[1],
                                                    output int unsigned tensor_decode_bits);

  // One NVFP4 block of 16 FP32 values (bits) under a tensor amax (FP32 bits): its E4M3 scale byte, 16 E2M1
  // codes (element 0 first) and the tensor decode scale fl32(1 / S_enc) as FP32 bits, under the rule an
  // nvfp4-block golden file's header names; $fatal on a name the library refuses.
  function automatic void qmx_expect_nvfp4_block(input bit [31:0] x[16], input bit [31:0] tensor_amax,
                                                 input string rule, output bit [7:0] scale, output bit [3:0] codes[16],
                                                 output bit [31:0] tensor_decode);
    int unsigned v[16], dec;
    byte unsigned c[16], s[1];
    foreach (x[j]) v[j] = x[j];
    if (qmx_nvfp4_blocks_bits(v, 1, 16, tensor_amax, rule, 16, null, c, s, dec) != 0)
      $fatal(1, "qmx_dpi: %s", qmx_last_error());
    scale = s[0];
    foreach (c[j]) codes[j] = c[j][3:0];
    tensor_decode = dec;
  endfunction

  // Dot products (qmx_c.h qmx_dot): d = sum of a[k] b[k] (+ c) under an accumulation model (exact, fp32-seq,
  // block-exact, hopper-fp8, hopper-fp8-fast, blackwell-mxf8f6f4, blackwell-mxf4nvf4, fused:..., as
  // `qmx-sim gemm --model` names them). The arrays hold up to QMX_DOT_MAX_K codes, of which k are read, and
  // one scale word per block (UE8M0 and E4M3 bytes, FP32 bits); tensor scales, C and D travel as FP32 bits.
  localparam int QMX_DOT_MAX_K = 4096;
  import "DPI-C" function int qmx_dot(input string model, input string a_format, input byte unsigned a[QMX_DOT_MAX_K],
                                      input string b_format, input byte unsigned b[QMX_DOT_MAX_K],
                                      input longint unsigned k, input string scale_format,
                                      input int unsigned sa[QMX_DOT_MAX_K], input int unsigned sb[QMX_DOT_MAX_K],
                                      input longint unsigned block, input int unsigned tensor_a_bits,
                                      input int unsigned tensor_b_bits, input int has_c, input int unsigned c_bits,
                                      output int unsigned d_bits);

  // The expected D (FP32 bits) of one dot of k codes, as a dot golden file's header describes it: formats a and
  // b, k, scale (none ue8m0 e4m3 fp32) and block, tensor-a and tensor-b (FP32 bits; 32'h3f800000 for none),
  // model; has_c 0 for no C operand. $fatal on a name or size the library refuses.
  function automatic bit [31:0] qmx_expect_dot(input string model, input string a_format, input string b_format,
                                               input int k, input byte unsigned a[QMX_DOT_MAX_K],
                                               input byte unsigned b[QMX_DOT_MAX_K], input string scale_format,
                                               input int block, input int unsigned sa[QMX_DOT_MAX_K],
                                               input int unsigned sb[QMX_DOT_MAX_K], input bit [31:0] tensor_a,
                                               input bit [31:0] tensor_b, input bit has_c, input bit [31:0] c);
    int unsigned d;
    if (k < 1 || k > QMX_DOT_MAX_K) $fatal(1, "qmx_dpi: k = %0d is outside 1..%0d", k, QMX_DOT_MAX_K);
    if (qmx_dot(model, a_format, a, b_format, b, k, scale_format, sa, sb, block, tensor_a, tensor_b, has_c, c, d) != 0)
      $fatal(1, "qmx_dpi: %s", qmx_last_error());
    return d;
  endfunction

  // Helpers for a bench that reads golden files. The file named by +golden=FILE, opened for reading, after
  // qmx_check_abi(); $fatal with a usage line naming `what` (the kind of file) when there is none.
  function automatic int qmx_open_golden(output string path, input string what);
    int fd;
    if (!$value$plusargs("golden=%s", path)) $fatal(1, "usage: +golden=FILE (%s)", what);
    qmx_check_abi();
    fd = $fopen(path, "r");
    if (fd == 0) $fatal(1, "cannot open %s", path);
    return fd;
  endfunction

  // Whether line s holds key (a header's " block=32 ").
  function automatic bit qmx_line_has(input string s, input string key);
    for (int i = 0; i + key.len() <= s.len(); ++i)
      if (s.substr(i, i + key.len() - 1) == key) return 1;
    return 0;
  endfunction

  // The value of header key `key` (" name=") in line s, up to the next space; "" when s has no such key.
  function automatic string qmx_line_value(input string s, input string key);
    for (int i = 0; i + key.len() <= s.len(); ++i)
      if (s.substr(i, i + key.len() - 1) == key) begin
        int j = i + key.len();
        while (j < s.len() && s.getc(j) != " " && s.getc(j) != "\n") ++j;
        return s.substr(i + key.len(), j - 1);
      end
    return "";
  endfunction

  // The end of a file's check: $fatal when it held no case or some differed, else the PASS line
  // ("PASS FILE: N UNIT (WHAT), file and DPI model agree").
  function automatic void qmx_file_result(input string path, input int cases, input int errors, input string unit,
                                          input string what);
    if (cases == 0) $fatal(1, "%s: no cases", path);
    if (errors != 0) $fatal(1, "%s: %0d of %0d %s differ", path, errors, cases, unit);
    $display("PASS %s: %0d %s (%s), file and DPI model agree", path, cases, unit, what);
  endfunction

endpackage
