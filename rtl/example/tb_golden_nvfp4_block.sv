// tb_golden_nvfp4_block.sv: an example bench to copy for an NVFP4 quantizer. It reads one qmx-sim golden NVFP4
// block file (golden/level1/nvfp4-block/e2m1_RULE.txt, +golden=FILE: the tensor amax, 16 FP32 inputs, the
// tensor decode scale, the E4M3 block scale, 16 E2M1 codes and the flags per line) and checks every block
// twice: the file's decode scale, block scale and codes against the reference model called through DPI
// (rtl/qmx_dpi.sv qmx_expect_nvfp4_block). In a real bench the design's outputs take the place of the model's
// in the second comparison. The flags are the file's own. Exits non-zero on a file that disagrees (after
// reporting up to 10 blocks).
module tb_golden_nvfp4_block;
  import qmx_dpi::*;

  string path, line, op, rule, rest;
  int fd, got, cases, errors;
  bit [31:0] amax, x[16], want_decode, decode;
  bit [7:0] want_scale, scale;
  bit [3:0] want_codes[16], codes[16];

  initial begin
    fd = qmx_open_golden(path, "a golden nvfp4-block file");
    cases = 0;
    errors = 0;
    op = "";
    while ($fgets(line, fd) != 0) begin
      if (line.len() >= 5 && line.substr(0, 4) == "# op=") begin
        got = $sscanf(line, "# op=%s rule=%s %s", op, rule, rest);
        if (got < 2 || op != "nvfp4-block") $fatal(1, "%s: not an op=nvfp4-block file (%0d header fields read)", path, got);
        // The model's call takes blocks of 16 and the default cast options: refuse a file with others.
        if (!qmx_line_has(line, " block=16 ") || !qmx_line_has(line, " round=rne ") || !qmx_line_has(line, " sat=satfinite "))
          $fatal(1, "%s: this bench takes block=16 round=rne sat=satfinite", path);
        continue;
      end
      if (line.len() == 0 || line.getc(0) == "#" || line.getc(0) == "\n") continue;
      if (op == "") $fatal(1, "%s: a case before the header", path);
      // Fixed-width fields one space apart: the amax and 16 inputs (8 hex digits each), the decode scale (8),
      // the block scale (2), 16 codes of one hex digit, the flags (2).
      if (line.len() < 18 * 9 + 3 + 17 + 2) $fatal(1, "%s: malformed case line: %s", path, line);
      amax = line.substr(0, 7).atohex();
      for (int j = 0; j < 16; ++j) x[j] = line.substr(9 * (j + 1), 9 * (j + 1) + 7).atohex();
      want_decode = line.substr(153, 160).atohex();
      want_scale = line.substr(162, 163).atohex();
      for (int j = 0; j < 16; ++j) want_codes[j] = line.substr(165 + j, 165 + j).atohex();
      qmx_expect_nvfp4_block(x, amax, rule, scale, codes, decode);
      begin
        int bad = (scale != want_scale) + (decode != want_decode);
        for (int j = 0; j < 16; ++j) bad += codes[j] != want_codes[j];
        if (bad != 0) begin
          errors++;
          if (errors <= 10)
            $display("MISMATCH %s: block %0d: file decode %h scale %h, model decode %h scale %h, %0d fields differ",
                     path, cases, want_decode, want_scale, decode, scale, bad);
        end
      end
      cases++;
    end
    $fclose(fd);
    qmx_file_result(path, cases, errors, "blocks", rule);
    $finish;
  end
endmodule
