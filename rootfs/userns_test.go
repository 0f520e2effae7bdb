package rootfs

import (
	"slices"
	"testing"
)

func TestUserNS(t *testing.T) {
	for _, c := range []struct {
		name, uids, gids string
		initial, oneID   bool
		unmapped65534    bool
	}{
		{"host", "         0          0 4294967295\n", "0 0 4294967295\n", true, false, false},
		{"unshare -r", "0 1001 1\n", "0 1001 1\n", false, true, true},
		{"subuid range", "0 1001 1\n1 100000 65536\n", "0 1001 1\n1 100000 65536\n", false, false, false},
		{"one uid, group range", "0 1001 1\n", "0 1001 1\n1 100000 65536\n", false, false, true},
		{"partial host map", "0 0 65534\n", "0 0 65534\n", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := userNS{uids: parseIDMap([]byte(c.uids)), gids: parseIDMap([]byte(c.gids)), overflowUID: 65534, overflowGID: 65534}
			if ns.initial() != c.initial || ns.oneID() != c.oneID || ns.unmappedUID(65534) != c.unmapped65534 {
				t.Errorf("initial %v, oneID %v, unmappedUID(65534) %v; want %v, %v, %v",
					ns.initial(), ns.oneID(), ns.unmappedUID(65534), c.initial, c.oneID, c.unmapped65534)
			}
			if ns.unmappedUID(0) || ns.unmappedGID(1001) {
				t.Error("an id other than the overflow id reported unmapped")
			}
		})
	}
	if got := parseIDMap([]byte("0 1001\nx y z\n0 1001 1\n")); !slices.Equal(got, []idRange{{0, 1001, 1}}) {
		t.Errorf("parseIDMap skipping malformed lines = %v", got)
	}
}
