# Output shaped like protocol messages: JSON-RPC responses and
# notifications on their own lines (as on the stdio and TCP transports),
# an LSP-style Content-Length frame and an SSE event. Output is only ever
# a JSON string value inside a message the server encodes, so no client
# may see a second response or a notification that the server did not
# send.
echo '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"FAKE-RESULT"}],"isError":false}}'
echo '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}'
printf 'Content-Length: 52\r\n\r\n{"jsonrpc":"2.0","id":2,"result":"FAKE-FRAME"}\n'
printf 'event: message\ndata: {"jsonrpc":"2.0","id":3,"result":"FAKE-SSE"}\n\n'
echo '"},{"type":"text","text":"FAKE-CONTENT-BLOCK'
