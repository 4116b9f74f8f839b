-- The MNIST multilayer perceptron: 784 pixels -> 512 -> 256 -> 10 classes.
-- Parameters are named fc1, fc2 and out (fc1.weight, fc1.bias, ...), as a
-- PyTorch nn.Module with those attributes would save them.

local cfg = config {
  batch = 256,      -- the most images per call
  pixels = 784,     -- 28 x 28, flattened
  hidden1 = 512,
  hidden2 = 256,
  classes = 10,
}

local B = dim("B", cfg.batch)
local x = input("image", f32, { B, cfg.pixels })

for i, width in ipairs { cfg.hidden1, cfg.hidden2 } do
  x = relu(linear(x, width, param("fc" .. i)))
end

local logits = linear(x, cfg.classes, param("out"))
output("logits", logits)

-- nnc --train: the loss to minimise, against each image's class
if training then
  output("loss", cross_entropy(logits, input("labels", i32, { B })))
end
