# An endless stream of short lines: the output cap must stop the run (the
# verdict is output_limit, the text ends with the truncation note) without
# buffering unbounded output in the server.
yes "flood line"
