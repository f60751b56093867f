// tb_golden_dot.sv: an example bench to copy for a dot-product or MMA unit. It reads one qmx-sim golden dot
// file (golden/level1/gemm/*.txt, +golden=FILE: per line the k codes of a and of b, their block scales, C and
// D as FP32 bits, the flags) and checks every case twice: the file's D against the reference model called
// through DPI (rtl/qmx_dpi.sv qmx_expect_dot) under the model, formats, block size and tensor scales the
// header names. In a real bench the design's D takes the place of the model's in the second comparison. The
// files of hardware-measured outputs (observed=hardware) check the model against the H200's own results. Exits
// non-zero on a file that disagrees (after reporting up to 10 cases).
module tb_golden_dot;
  import qmx_dpi::*;

  string path, line, model, afmt, bfmt, scale_fmt, fa, fb, fsa, fsb, fc, fd_, fflags;
  int fd, got, cases, errors, k, block, nscales, digits;
  bit [31:0] tensor_a, tensor_b, c, want, d;
  byte unsigned a[QMX_DOT_MAX_K], b[QMX_DOT_MAX_K];
  int unsigned sa[QMX_DOT_MAX_K], sb[QMX_DOT_MAX_K];

  // n words of w hex digits from s into v; 0 when s is not n * w digits long.
  function automatic bit words(input string s, input int n, input int w, output int unsigned v[QMX_DOT_MAX_K]);
    if (s.len() != n * w) return 0;
    for (int i = 0; i < n; ++i) v[i] = s.substr(w * i, w * i + w - 1).atohex();
    return 1;
  endfunction

  initial begin
    int unsigned tmp[QMX_DOT_MAX_K];
    fd = qmx_open_golden(path, "a golden dot file");
    cases = 0;
    errors = 0;
    model = "";
    while ($fgets(line, fd) != 0) begin
      if (line.len() >= 5 && line.substr(0, 4) == "# op=") begin
        if (qmx_line_value(line, "# op=") != "dot") $fatal(1, "%s: not an op=dot file", path);
        model = qmx_line_value(line, " model=");
        afmt = qmx_line_value(line, " a=");
        bfmt = qmx_line_value(line, " b=");
        scale_fmt = qmx_line_value(line, " scale=");
        // (Verilator takes no method call on a function's result: each value through a variable.)
        fa = qmx_line_value(line, " k=");
        k = fa.atoi();
        fa = qmx_line_value(line, " block=");
        block = scale_fmt == "none" ? 0 : fa.atoi();
        fa = qmx_line_value(line, " tensor-a=");
        tensor_a = fa == "" ? 32'h3f800000 : fa.atohex();
        fa = qmx_line_value(line, " tensor-b=");
        tensor_b = fa == "" ? 32'h3f800000 : fa.atohex();
        if (model == "" || afmt == "" || bfmt == "" || k < 1 || k > QMX_DOT_MAX_K || (scale_fmt != "none" && block < 1))
          $fatal(1, "%s: a dot header needs model, a, b, k (1..%0d), scale and block: %s", path, QMX_DOT_MAX_K, line);
        nscales = block == 0 ? 0 : k / block;
        digits = scale_fmt == "fp32" ? 8 : 2;
        continue;
      end
      if (line.len() == 0 || line.getc(0) == "#" || line.getc(0) == "\n") continue;
      if (model == "") $fatal(1, "%s: a case before the header", path);
      got = $sscanf(line, "%s %s %s %s %s %s %s", fa, fb, fsa, fsb, fc, fd_, fflags);
      if (got != 7 || !words(fa, k, 2, tmp)) $fatal(1, "%s: malformed case line %0d", path, cases);
      foreach (a[i]) a[i] = i < k ? tmp[i][7:0] : 0;
      if (!words(fb, k, 2, tmp)) $fatal(1, "%s: malformed b in case %0d", path, cases);
      foreach (b[i]) b[i] = i < k ? tmp[i][7:0] : 0;
      if (nscales != 0 && (!words(fsa, nscales, digits, sa) || !words(fsb, nscales, digits, sb)))
        $fatal(1, "%s: malformed scales in case %0d", path, cases);
      c = fc == "-" ? 0 : fc.atohex();
      want = fd_.atohex();
      d = qmx_expect_dot(model, afmt, bfmt, k, a, b, scale_fmt, block, sa, sb, tensor_a, tensor_b, fc != "-", c);
      if (d != want) begin
        errors++;
        if (errors <= 10) $display("MISMATCH %s: case %0d: file d %h, model d %h", path, cases, want, d);
      end
      cases++;
    end
    $fclose(fd);
    qmx_file_result(path, cases, errors, "cases", $sformatf("%s, %s x %s, k = %0d, scale %s", model, afmt, bfmt, k, scale_fmt));
    $finish;
  end
endmodule
