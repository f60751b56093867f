// tb_golden_memh.sv: the same check as tb_golden_convert.sv from a $readmemh image (qmx-sim golden gen
// --layout memh) of an FP32 -> 8-bit conversion file: 48-bit words {input[31:0], code[7:0], flags[7:0]}
// (the image's "// layout: 32 8 8" line). $readmemh skips the image's comment lines, so the conversion's
// options come as plusargs (rtl/example/run.sh reads them from the image's header comment):
//   +memh=FILE +cases=N +dst=e4m3 +opts=HEADER   (HEADER: the header's keys, "op=convert src=f32 ... round=rne ...")
module tb_golden_memh;
  import qmx_dpi::*;

  localparam int kMaxCases = 1 << 20;
  logic [47:0] mem[kMaxCases];
  string path, dst, opts;
  int n, errors;
  longint unsigned code;
  int unsigned flags;

  initial begin
    if (!$value$plusargs("memh=%s", path) || !$value$plusargs("cases=%d", n) || !$value$plusargs("dst=%s", dst) ||
        !$value$plusargs("opts=%s", opts))
      $fatal(1, "usage: +memh=FILE +cases=N +dst=FORMAT +opts=HEADER");
    qmx_check_abi();
    if (n <= 0 || n > kMaxCases) $fatal(1, "%s: %0d cases (1 .. %0d)", path, n, kMaxCases);
    $readmemh(path, mem, 0, n - 1);
    errors = 0;
    for (int i = 0; i < n; i++) begin
      if ($isunknown(mem[i])) $fatal(1, "%s: word %0d is not a case (x digits or too few words)", path, i);
      if (qmx_convert_keys("fp32", longint'(mem[i][47:16]), dst, opts, 0, code, flags) != 0)
        $fatal(1, "qmx_dpi: %s", qmx_last_error());
      if (code != longint'(mem[i][15:8]) || flags != int'(mem[i][7:0])) begin
        errors++;
        if (errors <= 10)
          $display("MISMATCH %s: word %0d input %h: image %h flags %h, model %h flags %h", path, i, mem[i][47:16],
                   mem[i][15:8], mem[i][7:0], code, flags);
      end
    end
    if (errors != 0) $fatal(1, "%s: %0d of %0d cases differ", path, errors, n);
    $display("PASS %s: %0d words (f32 -> %s; %s), image and DPI model agree", path, n, dst, opts);
    $finish;
  end
endmodule
