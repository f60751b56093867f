// tb_golden_convert.sv: an example bench to copy. It reads one qmx-sim golden conversion file
// (golden/level1/conversions/SRC_DST_ROUND_SAT.txt, +golden=FILE) and checks every case twice: the code and
// flags the file holds against the reference model called through DPI (rtl/qmx_dpi.sv), the way a bench
// checks its design's output against both. In a real bench, the design's output takes the place of the
// model's in the second comparison. Exits non-zero on the first file line that disagrees (after reporting
// up to 10).
module tb_golden_convert;
  import qmx_dpi::*;

  string path, line, header, op, src, dst, rnd, sat;
  int fd, got, cases, errors;
  longint unsigned x, want_code, want_flags, code;
  int unsigned flags;

  // A golden file names its source format f32 / f16 / bf16; the library says fp32 / fp16 / bf16.
  function automatic string lib_format(input string s);
    if (s == "f32") return "fp32";
    if (s == "f16") return "fp16";
    return s;
  endfunction

  initial begin
    fd = qmx_open_golden(path, "a golden conversion file");
    cases = 0;
    errors = 0;
    op = "";
    while ($fgets(line, fd) != 0) begin
      if (line.len() >= 5 && line.substr(0, 4) == "# op=") begin
        got = $sscanf(line, "# op=%s src=%s dst=%s round=%s sat=%s", op, src, dst, rnd, sat);
        if (got != 5 || op != "convert") $fatal(1, "%s: not an op=convert file (%0d header fields read)", path, got);
        header = line;  // every cast key of the file (nan-sign, subnormals, tininess, ...) goes to the model
        continue;
      end
      if (line.len() == 0 || line.getc(0) == "#" || line.getc(0) == "\n") continue;
      if (op == "") $fatal(1, "%s: a case before the header", path);
      got = $sscanf(line, "%h %h %h", x, want_code, want_flags);
      if (got != 3) $fatal(1, "%s: malformed case line: %s", path, line);
      if (qmx_convert_keys(lib_format(src), x, dst, header, 0, code, flags) != 0)
        $fatal(1, "qmx_dpi: %s", qmx_last_error());
      if (code != want_code || flags != want_flags) begin
        errors++;
        if (errors <= 10)
          $display("MISMATCH %s: input %h: file %h flags %h, model %h flags %h", path, x, want_code, want_flags, code,
                   flags);
      end
      cases++;
    end
    $fclose(fd);
    qmx_file_result(path, cases, errors, "cases", {src, " -> ", dst, ", ", rnd, ", ", sat});
    $finish;
  end
endmodule
