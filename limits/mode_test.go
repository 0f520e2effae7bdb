package limits

import "testing"

func TestModeString(t *testing.T) {
	tests := []struct {
		m    Mode
		want string
	}{
		{0, "unset"},
		{Unavailable, "unavailable"},
		{Legacy, "legacy"},
		{Hybrid, "hybrid"},
		{Unified, "unified"},
		{42, "Mode(42)"},
	}
	for _, tt := range tests {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(tt.m), got, tt.want)
		}
	}
}
