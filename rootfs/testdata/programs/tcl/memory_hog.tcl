set keep {}
while 1 { lappend keep [string repeat x 1048576] }
