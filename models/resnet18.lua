-- ResNet-18 (He et al. 2015) with torchvision's parameter names (conv1,
-- bn1, layer1.0.conv1, layer2.0.downsample.0, ..., fc), so the state_dict
-- of torchvision.models.resnet18 loads as it is. Batch norm uses the running
-- statistics (inference). -D layout=nhwc takes the image as [B, H, W, 3]
-- (the same weights); -D size=, width= and classes= shrink it for tests.

local cfg = config {
  batch = 32,       -- the most images per call
  size = 224,       -- image height and width
  width = 64,       -- channels of the first stage (then x2, x4, x8)
  classes = 1000,
  layout = "nchw",
}

local B = dim("B", cfg.batch)
local nhwc = cfg.layout == "nhwc"
local image = nhwc and { B, cfg.size, cfg.size, 3 } or { B, 3, cfg.size, cfg.size }
local x = input("image", f32, image)
local L = { layout = cfg.layout }

-- conv (no bias) then batch norm, as torchvision's blocks have them
local function conv_bn(x, channels, k, conv, bn, stride)
  local pad = k // 2
  local y = conv2d(x, channels, k, conv, { stride = stride or 1, padding = pad, bias = false, layout = cfg.layout })
  return batchnorm(y, bn, L)
end

x = relu(conv_bn(x, cfg.width, 7, param("conv1"), param("bn1"), 2))
x = maxpool2d(x, 3, { stride = 2, padding = 1, layout = cfg.layout })

local cin = cfg.width
for stage = 1, 4 do
  local c = cfg.width * 2 ^ (stage - 1) // 1
  for block = 0, 1 do
    local p = "layer" .. stage .. "." .. block
    local stride = (stage > 1 and block == 0) and 2 or 1
    local y = relu(conv_bn(x, c, 3, param(p .. ".conv1"), param(p .. ".bn1"), stride))
    y = conv_bn(y, c, 3, param(p .. ".conv2"), param(p .. ".bn2"))
    local shortcut = x
    if stride ~= 1 or cin ~= c then
      shortcut = conv_bn(x, c, 1, param(p .. ".downsample.0"), param(p .. ".downsample.1"), stride)
    end
    x = relu(y + shortcut)
    cin = c
  end
end

x = flatten(adaptive_avgpool2d(x, 1, L))
output("logits", linear(x, cfg.classes, param("fc")))
