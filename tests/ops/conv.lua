-- The image ops at odd sizes: conv2d with every stride, padding, dilation
-- and groups combination that PyTorch allows here, NCHW and NHWC (an RGB
-- image's rows of taps as one run of channels), conv1d,
-- the pools (padding, dilation, count_include_pad), adaptive average
-- pooling, batch norm (alone, and folded into the convolution before it, NCHW
-- and NHWC with a residual) and flatten.
local B = dim("B", 4)
local x = input("x", f32, { B, 6, 11, 9 })        -- NCHW: 6 channels, 11 x 9
local xh = input("xh", f32, { B, 10, 7, 6 })      -- NHWC: 10 x 7, 6 channels
local s = input("s", f32, { B, 4, 13 })           -- a sequence: 4 channels, 13 steps
local xr = input("xr", f32, { B, 9, 10, 3 })      -- NHWC RGB: a stem's rows of taps (8 x 3 channels)

output("plain", conv2d(x, 5, 3, param("c1")))
output("strided", conv2d(x, 4, { 3, 2 }, param("c2"), { stride = { 2, 3 }, padding = { 1, 0 } }))
output("dilated", conv2d(x, 3, 3, param("c3"), { dilation = { 2, 1 }, padding = 2, bias = false }))
output("grouped", conv2d(x, 9, 1, param("c4"), { groups = 3 }))
output("depthwise", conv2d(x, 6, 3, param("c5"), { groups = 6, padding = 1, stride = 2 }))
output("nhwc", relu(conv2d(xh, 7, 2, param("c6"), { layout = "nhwc", stride = 2, padding = 1 })))
output("rgb", relu(conv2d(xr, 8, 7, param("c11"), { layout = "nhwc", stride = 2, padding = 3 })))
output("conv1d", conv1d(s, 5, 3, param("c7"), { padding = 1 }))
output("conv1d_nlc", conv1d(transpose(s, 2, 3), 3, 4, param("c8"), { layout = "nlc", stride = 2, dilation = 2 }))
output("maxpool", maxpool2d(x, 3, { stride = 2, padding = 1 }))
output("maxpool_dilated", maxpool2d(xh, 2, { dilation = 2, layout = "nhwc" }))
output("avgpool", avgpool2d(x, { 2, 3 }, { padding = 1 }))
output("adaptive", adaptive_avgpool2d(x, { 1, 3 }))
output("batchnorm", batchnorm(x, param("bn")))
output("batchnorm1d", batchnorm(flatten(x), param("bn1"), { eps = 1e-3 }))
output("flatten", flatten(x, 3))
output("conv_bn", relu(batchnorm(conv2d(x, 5, 3, param("c9"), { padding = 1, bias = false }), param("bn2"))))
local yh = conv2d(xh, 6, 3, param("c10"), { padding = 1, layout = "nhwc" })
output("conv_bn_nhwc", relu(batchnorm(yh, param("bn3"), { layout = "nhwc" }) + xh))
