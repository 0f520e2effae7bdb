# First run: a 4 MiB file that the next run (ws_churn_rewrite.sh) rewrites
# while the test reads it with read_file: files changed while being read.
head -c 4194304 /dev/urandom > /work/churn && echo "churn written"
