-- No OS access from a model.
local seed = os.time()
output("y", relu(input("x", f32, { seed % 7 + 1 })))
