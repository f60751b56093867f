// tb_golden_mx_block.sv: an example bench to copy for an MX quantizer. It reads one qmx-sim golden MX block
// file (golden/level1/mx-block/ELEM_RULE_NAN[_SCALING].txt, +golden=FILE: 32 FP32 inputs, the UE8M0 scale,
// 32 element codes and the flags per line) and checks every block twice: the scale and codes the file holds
// against the reference model called through DPI (rtl/qmx_dpi.sv qmx_expect_mx_block). In a real bench, the
// design's scale and codes take the place of the model's in the second comparison. The flags are the
// file's own (the C ABI's block call gives none). Exits non-zero on a file that disagrees (after reporting up
// to 10 blocks).
module tb_golden_mx_block;
  import qmx_dpi::*;

  string path, line, op, elem, rule, nan_policy, scaling;
  int fd, got, cases, errors;
  bit [31:0] x[32];
  bit [7:0] want_scale, want_flags, scale, codes[32];
  bit [255:0] want_codes;  // 64 hex digits, element 0 first (the leftmost)

  initial begin
    fd = qmx_open_golden(path, "a golden mx-block file");
    cases = 0;
    errors = 0;
    op = "";
    while ($fgets(line, fd) != 0) begin
      if (line.len() >= 5 && line.substr(0, 4) == "# op=") begin
        got = $sscanf(line, "# op=%s elem=%s rule=%s nan=%s scaling=%s", op, elem, rule, nan_policy, scaling);
        if (got != 5 || op != "mx-block") $fatal(1, "%s: not an op=mx-block file (%0d header fields read)", path, got);
        // The model's call takes blocks of 32 and the default cast options: refuse a file with others.
        if (!qmx_line_has(line, " block=32 ") || !qmx_line_has(line, " round=rne ") || !qmx_line_has(line, " sat=satfinite "))
          $fatal(1, "%s: this bench takes block=32 round=rne sat=satfinite", path);
        continue;
      end
      if (line.len() == 0 || line.getc(0) == "#" || line.getc(0) == "\n") continue;
      if (op == "") $fatal(1, "%s: a case before the header", path);
      // Fixed-width fields: 32 inputs of 8 hex digits, the scale (2), the codes (64) and the flags (2), one
      // space apart.
      if (line.len() < 32 * 9 + 3 + 65 + 2) $fatal(1, "%s: malformed case line: %s", path, line);
      for (int j = 0; j < 32; ++j) x[j] = line.substr(9 * j, 9 * j + 7).atohex();
      want_scale = line.substr(288, 289).atohex();
      for (int j = 0; j < 32; ++j) want_codes[255 - 8 * j -: 8] = line.substr(291 + 2 * j, 292 + 2 * j).atohex();
      want_flags = line.substr(356, 357).atohex();
      qmx_expect_mx_block(x, elem, rule, nan_policy, scaling, scale, codes);
      begin
        int bad = scale != want_scale;
        for (int j = 0; j < 32; ++j) bad += codes[j] != want_codes[255 - 8 * j -: 8];
        if (bad != 0) begin
          errors++;
          if (errors <= 10)
            $display("MISMATCH %s: block %0d: file scale %h codes %h, model scale %h codes %h ...", path, cases,
                     want_scale, want_codes, scale, {codes[0], codes[1], codes[2], codes[3]});
        end
      end
      cases++;
    end
    $fclose(fd);
    qmx_file_result(path, cases, errors, "blocks", {elem, ", ", rule, ", ", nan_policy, ", ", scaling});
    $finish;
  end
endmodule
