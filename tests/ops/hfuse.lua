-- Horizontal fusion (compiler/passes/hfuse.c): which linears of one input
-- become one GEMM, and which must stay apart. Odd sizes throughout.
local B = dim("B", 5)
local x = input("x", f32, { B, 13 })

-- fused: three linears of x with biases (N 7 + 3 + 11), read by a softmax,
-- a reduction and a reshape
local a = linear(x, 7, param("qkv.a"))
local b = linear(x, 3, param("qkv.b"))
local c = linear(x, 11, param("qkv.c"))
output("fused", concat({ softmax(a), sum(b, 2, true), sum(c:reshape { B, 11, 1 }, 3) }, 2))

-- fused: two [in, out] weights without biases (GPT-2's layout)
local d = linear(x, 5, param("io.d"), { layout = "in_out", bias = false })
local e = linear(x, 9, param("io.e"), { layout = "in_out", bias = false })
output("in_out", concat({ softmax(d), softmax(e) }, 2))

-- apart: different inputs
local x2 = input("x2", f32, { B, 13 })
local x3 = input("x3", f32, { B, 13 })
output("inputs", softmax(linear(x2, 4, param("apart.x2"))) + softmax(linear(x3, 4, param("apart.x3"))))

-- apart: one with a bias, one without
local z = input("z", f32, { B, 6 })
output("bias", softmax(linear(z, 4, param("bias.with"))) + softmax(linear(z, 4, param("bias.without"), { bias = false })))

-- apart: a weight that something else reads too (tied)
local u = input("u", f32, { B, 6 })
local tied = param("tied.weight", { 4, 6 })
local t1 = linear(u, 4, tied, { bias = false })
local t2 = linear(u, 4, param("tied.other"), { bias = false })
output("tied", softmax(t1) + softmax(t2) + softmax(linear(z, 4, tied, { bias = false })))

-- apart: a linear that is a graph output itself
local v = input("v", f32, { B, 8 })
output("out_itself", linear(v, 3, param("out.y")))
output("out_other", softmax(linear(v, 3, param("out.w"))))

-- apart: an elementwise reader, which the GEMM's epilogue takes (SwiGLU)
local w = input("w", f32, { B, 10 })
output("swiglu", silu(linear(w, 6, param("mlp.gate"))) * linear(w, 6, param("mlp.up")))
