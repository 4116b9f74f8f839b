-- Elementwise chains inside the kernel of the norm or reduction they feed
-- (CUDA: nnc_compile_opts.row_loops, reduce_loops; elsewhere kernels of
-- their own): a lookup plus a scaled input into a layernorm of rows of 17
-- 16-byte vectors, a chain into an rmsnorm of 37 columns (element by
-- element), a mask-weighted mean over T (BERT's pooling), a max with a
-- chain after it and a mean over the last axis. Side outputs (CUDA: values
-- of the shape a chain kernel's loop walks that others read, stored by
-- that kernel): x_half, an op on what the pooling reads (BERT's last
-- hidden state cast to its output); w, the mean's input, itself an
-- output; an embedding sum read by a layernorm and by an add after it;
-- one read by an add after the linear whose layernorm prologue it feeds
-- (GPT-2's first block: the norm moves into the sum's row kernel).
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
output("x_half", x * 0.5)
local w = y * 3 - 1
output("w", w)
output("mean_w", mean(w, 2))
local e = embedding(ids, param("table2", { 50, 40 })) * 2
output("ln_shared", layernorm(e, param("ln4")) + e)
local e2 = embedding(mask, param("table3", { 3, 24 })) * 0.5
output("ln_linear", e2 + linear(layernorm(e2, param("ln5")), 24, param("fc")))
