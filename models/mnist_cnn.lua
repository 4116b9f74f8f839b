-- The MNIST convolutional network of PyTorch's examples: two convolutions
-- (3 x 3, relu), a 2 x 2 max pool, then two linear layers to 10 classes.
-- Parameters are named conv1, conv2, fc1 and fc2 (conv1.weight [32, 1, 3, 3],
-- fc1.weight [128, 9216], ...), as that nn.Module saves them, so its
-- state_dict loads as it is. -D size=... and the widths shrink it for tests.

local cfg = config {
  batch = 64,       -- the most images per call
  size = 28,        -- image height and width
  channels = 1,
  conv1 = 32,
  conv2 = 64,
  hidden = 128,
  classes = 10,
}

local B = dim("B", cfg.batch)
local x = input("image", f32, { B, cfg.channels, cfg.size, cfg.size })

x = relu(conv2d(x, cfg.conv1, 3, param("conv1")))
x = relu(conv2d(x, cfg.conv2, 3, param("conv2")))
x = maxpool2d(x, 2)
x = flatten(x)                                    -- [B, conv2 * 12 * 12] in NCHW order
x = relu(linear(x, cfg.hidden, param("fc1")))
local logits = linear(x, cfg.classes, param("fc2"))
output("logits", logits)

-- nnc --train: the loss to minimise, against each image's class
if training then
  output("loss", cross_entropy(logits, input("labels", i32, { B })))
end
