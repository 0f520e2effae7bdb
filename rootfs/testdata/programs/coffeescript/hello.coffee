fs = require 'fs'
name = fs.readFileSync(0, 'utf8').split('\n')[0]
console.log "hello, #{name}"
