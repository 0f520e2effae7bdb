stderr.writeLine("boom")
quit(3)
