# libqmx's sources, by layer (lib/README.md "Layers"), relative to lib/. lib/CMakeLists.txt builds them and
# the fuzz build (tests/fuzz) compiles them once more with coverage instrumentation. A new source is added
# here: qmx_check_sources (top-level CMakeLists.txt) stops the configure step if one under src/ is missing.
set(QMX_LIB_SOURCE_LIST
    src/fork_safety.cc
    src/format/format.cc
    src/round/round_pack_ref.cc src/round/cast_options.cc src/round/convert.cc src/round/convert_simd.cc
    src/round/cast_profiles.cc src/round/prove.cc
    src/rng/distributions.cc
    src/scale/scale.cc src/scale/scale_ref.cc
    src/quantize/quantize.cc src/quantize/quantize_ref.cc src/quantize/quantize_pack.cc
    src/quantize/quantize_spec.cc src/quantize/spec_io.cc src/quantize/mx.cc src/quantize/mx_ref.cc src/quantize/bfp.cc
    src/quantize/amax_simd.cc
    src/quantize/mx_simd.cc
    src/quantize/nvfp4_strip_simd.cc
    src/transform/transform.cc src/transform/transform_simd.cc
    src/gemm/gemm.cc src/gemm/gemm_ref.cc src/gemm/gemm_buffers.cc src/gemm/gemm_fast.cc
    src/gemm/gemm_fast_exact.cc src/gemm/gemm_fast_fused.cc src/gemm/gemm_simd.cc src/gemm/gemm_fused_simd.cc
    src/gemm/gemm_group_simd.cc src/gemm/gemm_scaled_simd.cc src/gemm/gemm_cdna3_simd.cc src/gemm/scaled_mm.cc
    src/metrics/metrics.cc src/metrics/metrics_simd.cc
    src/recipe/recipe.cc src/recipe/recipe_step.cc src/recipe/recipe_sequence.cc src/recipe/recipe_reference.cc
    src/recipe/linear_layer.cc
    src/study/study.cc src/study/sweeps.cc
    src/io/atomic_file.cc src/io/limits.cc src/io/npy.cc src/io/packing.cc src/io/safetensors.cc src/io/sha256.cc
    src/checkpoint/checkpoint.cc src/checkpoint/audit.cc src/checkpoint/convert_audit.cc
    src/golden/golden.cc src/golden/golden_coverage.cc src/golden/golden_coverage_ops.cc src/golden/golden_ops.cc src/golden/golden_gen.cc src/golden/golden_gen_conversions.cc
    src/golden/golden_gen_blocks.cc src/golden/golden_gen_gemm.cc)
# The training recipes' FP64 reference GEMM, the metrics' lane sums (scalar and Highway twins),
# scaled_mm's epilogue (one FP32 rounding per step, as cuBLASLt), the 4over6 error sums (scale.cc) and
# QuEST's group statistics (transform.cc, which the GPU engine's QuestKernel repeats) keep their order of
# operations (no FMA contraction) under any -march and SIMD target.
set(QMX_LIB_NO_CONTRACT_LIST
    src/recipe/recipe.cc src/recipe/recipe_step.cc src/recipe/recipe_sequence.cc src/recipe/recipe_reference.cc
    src/recipe/linear_layer.cc src/metrics/metrics.cc src/metrics/metrics_simd.cc src/gemm/scaled_mm.cc
    src/scale/scale.cc src/transform/transform.cc src/gemm/gemm_fast_exact.cc)
# Portable tiles whose inner loops cut terms with trunc / nearbyint / floor: GCC vectorizes those only when
# floating-point exceptions need not be kept (the library never reads the FP status flags; every cut value
# is exact, so the results are unchanged).
set(QMX_LIB_NO_TRAPPING_LIST src/gemm/gemm_fast_fused.cc)
