# Second run of ws_symlinks in the same session: the workspace is filled
# back with the links as links (inert text) and the request's own file
# "planted" replaces the planted link instead of writing through it.
cd /work || exit 1
echo "planted: $(cat planted)"
[ -L planted ] && echo "planted is still a link ESCAPED"
# write_file replaced the link "canary" by a file of its own (it never
# writes through a link): its content is what the test wrote, nothing of
# the host (the test checks every output for the host canary's secret).
echo "canary: $(cat canary 2>&1)"
for l in canary canarydir procroot up climb d/up; do [ -L "$l" ] && echo "link $l kept"; done
true
