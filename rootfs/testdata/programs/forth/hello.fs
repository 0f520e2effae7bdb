create buf 256 allot
." hello, " buf buf 256 stdin read-line 2drop type cr
