package main

import (
	"reflect"
	"testing"

	"github.com/sandcell/sandcell/api"
	"github.com/sandcell/sandcell/interp"
	"github.com/sandcell/sandcell/mcp"
)

// A live cell's interp events as run_cell's (mcp.CellEvent): output,
// the value, an image, the error with its traceback, the count.
func TestLiveCellEventOf(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nrest")
	for _, c := range []struct {
		ev   interp.Event
		want mcp.CellEvent
	}{
		{interp.Event{Stream: "stdout", Text: "hi\n"}, mcp.CellEvent{Stream: "stdout", Text: "hi\n"}},
		{interp.Event{Result: &interp.Result{Text: "42", HTML: "<b>42</b>", Main: true}}, mcp.CellEvent{Result: &mcp.CellItem{Text: "42", Value: true}}},
		{interp.Event{Result: &interp.Result{Image: png, MIME: "image/png"}}, mcp.CellEvent{Result: &mcp.CellItem{Image: png, MIME: "image/png"}}},
		{interp.Event{Error: &interp.CellError{Name: "ZeroDivisionError", Value: "division by zero", Traceback: "Traceback ..."}},
			mcp.CellEvent{Error: &api.CellError{Type: "ZeroDivisionError", Message: "division by zero", Traceback: "Traceback ..."}}},
		{interp.Event{ExecutionCount: 3}, mcp.CellEvent{ExecutionCount: 3}},
	} {
		if got := cellEventOf(c.ev); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%+v: %+v, want %+v", c.ev, got, c.want)
		}
	}
}
