-- lstm.weight_hh_l0 declared for a hidden size of 5 ([4*5, 5]); lstm() is then asked for 6.
local x = input("x", f32, { 4, 2, 3 })
local w = param("lstm.weight_hh_l0", { 20, 5 })
local y = lstm(x, 6, param("lstm"))
output("y", y + w:sum())
