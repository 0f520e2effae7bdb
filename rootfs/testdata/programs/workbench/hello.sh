# The tools of E2B's templates are there: git, node and python3 with its
# data stack; then hello world from stdin.
git --version >/dev/null && node -e 0 && python3 -c 'import pandas' || exit 9
read -r name
echo "hello, ${name}"
