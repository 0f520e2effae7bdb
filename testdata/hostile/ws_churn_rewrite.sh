# Rewrites /work/churn for a second with ever-changing sizes while the test
# reads the session's copy; it ends with a small final content. The test's
# reads must all end (no hang, no read past the end) and, after the save,
# see exactly the final content.
end=$(( $(date +%s) + 1 ))
i=0
while [ "$(date +%s)" -le "$end" ]; do
  i=$((i + 1))
  head -c $(( (i * 7919 * 13) % 3000000 )) /dev/urandom > /work/churn
  : > /work/churn
done
echo final > /work/churn
echo "rewrites done"
