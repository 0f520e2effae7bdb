fs = require "fs"
loop
  fs.writeSync 1, "flood line\n"
