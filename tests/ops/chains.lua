-- Elementwise chains inside the kernel of the norm or reduction they feed
-- (CUDA: nnc_compile_opts.row_loops, reduce_loops; elsewhere kernels of
-- their own): a lookup plus a scaled input into a layernorm of rows of 17
-- 16-byte vectors, a chain into an rmsnorm of 37 columns (element by
-- element), a mask-weighted mean over T (BERT's pooling), a max with a
-- chain after it and a mean over the last axis.
local B = dim("B", 5)
local T = dim("T", 19)
local ids = input("ids", i32, { B, T })
local mask = input("mask", i32, { B, T })
local x = input("x", f32, { B, T, 136 })
local y = input("y", f32, { B, T, 37 })
output("ln_chain", layernorm(embedding(ids, param("table", { 50, 136 })) + x * 2, param("ln")))
output("ln_input_table", layernorm(embedding(ids, input("tab", f32, { 50, 24 })) + 1, param("ln3")) * 2)
output("rms_chain", rmsnorm(y * y + 1, param("rms"), { eps = 1e-5 }))
local m = cast(mask, f32):reshape { B, T, 1 }
output("pooled", sum(x * m, 2) / sum(m, 2))
output("max_t", max(relu(y) - 0.5, 2) * 3)
output("mean_c", mean(y + 1, 3))
