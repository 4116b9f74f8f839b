-- Convolutions for the CUDA target's implicit GEMM (an NHWC image of
-- bf16/f16 with channels a multiple of 8, on sm_90a): odd image sizes,
-- strides, dilation, a non-square kernel, a 1x1 downsampling, a 7x7 stem
-- over 8 channels and a 3x3 over 24 (k steps that span taps), output
-- channels that are no tile's multiple, and each epilogue (bias or
-- none, an activation, a residual before or after it); and the pools and
-- depthwise convolutions, which read the image straight too.
local B = dim("B", 3)
local x = input("x", f32, { B, 13, 11, 64 })
local y = input("y", f32, { B, 7, 9, 128 })
local z = input("z", f32, { B, 19, 17, 8 })
local u = input("u", f32, { B, 6, 5, 24 })
output("plain", conv2d(x, 64, 5, param("c1"), { padding = 2, layout = "nhwc" }))
output("strided", relu(conv2d(x, 72, { 3, 5 }, param("c2"), { stride = 2, padding = { 1, 2 }, layout = "nhwc" })))
-- (times 2: a graph output's widening cast would join the GEMM or pool instead)
output("dilated", gelu(conv2d(y, 104, 3, param("c3"), { dilation = 2, padding = 2, bias = false, layout = "nhwc" })) * 2)
output("pointwise", conv2d(x, 120, 1, param("c4"), { stride = 2, layout = "nhwc" }))
output("residual_relu", relu(conv2d(x, 64, 3, param("c5"), { padding = 1, layout = "nhwc" }) + x))
output("residual", conv2d(y, 128, 3, param("c6"), { padding = 1, layout = "nhwc" }) + y)
output("stem", relu(conv2d(z, 64, 7, param("c7"), { stride = 2, padding = 3, layout = "nhwc" })))
output("narrow", conv2d(u, 16, 3, param("c8"), { padding = 1, layout = "nhwc" }))
-- pools straight from the image (channels a multiple of 8)
output("maxpool", maxpool2d(x, 3, { stride = 2, padding = 1, layout = "nhwc" }) * 2)
output("maxpool_dilated", maxpool2d(z, 2, { dilation = 2, layout = "nhwc" }) * 2)
output("avgpool", avgpool2d(u, { 2, 3 }, { padding = 1, layout = "nhwc" }) * 2)
-- depthwise convolutions (a group a channel), from the image too
output("depthwise", conv2d(x, 64, 3, param("c9"), { groups = 64, padding = 2, dilation = 2, layout = "nhwc" }) * 2)
output("depthwise_strided", conv2d(u, 24, { 3, 5 }, param("c10"), { groups = 24, stride = 2, padding = { 1, 2 }, dilation = { 1, 2 }, bias = false, layout = "nhwc" }) * 2)
