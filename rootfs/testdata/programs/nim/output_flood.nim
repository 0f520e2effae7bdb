while true:
  echo "flood line"
