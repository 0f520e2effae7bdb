loop { say "flood line" }
