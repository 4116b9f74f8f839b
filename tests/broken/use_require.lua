-- Other files come in only through include().
local helpers = require("helpers")
output("y", helpers.relu(input("x", f32, { 3 })))
