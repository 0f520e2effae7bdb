# Invalid UTF-8 on both streams: lone continuation and start bytes, an
# overlong form, a UTF-16 surrogate and a truncated character at the end.
# The result must be valid UTF-8 (each bad run becomes U+FFFD) in the
# structured result and in the text block, and JSON-encodable.
printf 'start \377\376 lone \303\050 bad-pair \300\257 overlong \355\240\200 surrogate end\n'
printf 'err \377 side\n' >&2
printf 'cut at the end \342\202'
