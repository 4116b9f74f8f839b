-- include() cannot leave the model's folder.
local lib = include("../x.lua")
output("y", lib.block(input("x", f32, { 3 })))
