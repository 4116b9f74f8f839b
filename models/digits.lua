-- A small classifier for scikit-learn's bundled digits (load_digits: 1797
-- images of 8 x 8 pixels, 10 classes): 64 pixels -> 64 (relu) -> 10 classes,
-- no convolutions. Parameters are named fc1 and fc2 (fc1.weight, fc1.bias,
-- ...), as a PyTorch nn.Module with those attributes would save them.
-- bench/digits_data.py writes the data (pixels divided by 16, so in [0, 1]);
-- bench/train_compare.sh trains it with train_digits and with PyTorch.

local cfg = config {
  batch = 512,      -- the most images per call
  pixels = 64,      -- 8 x 8, flattened
  hidden = 64,
  classes = 10,
}

local B = dim("B", cfg.batch)
local x = input("image", f32, { B, cfg.pixels })

local h = relu(linear(x, cfg.hidden, param("fc1")))
local logits = linear(h, cfg.classes, param("fc2"))

-- Also under --train: train_digits reads it for the validation accuracy.
output("logits", logits)

-- nnc --train: the loss to minimise, against each image's class
if training then
  output("loss", cross_entropy(logits, input("labels", i32, { B })))
end
