# A daemon that keeps writing /work after the program exits, so that the
# supervisor would read (save) a file while it changes: the save must come
# only after every process of the run is dead, so the saved tree is
# final; the test lists and reads it twice, some time apart.
( setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /work/late; echo $i >> /work/log; done' & )
sleep 0.3
echo "main exits"
