package rootfs

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// userNS is the user namespace this process runs in, as far as the store
// cares: which ids it maps and which ids stat(2) shows for owners it does
// not map. Rootless sandcell re-executes itself as root of a namespace
// that maps one id, the user's own; there, files owned by host root look
// owned by the overflow ids (nobody, 65534) and cannot be chowned to.
type userNS struct {
	uids, gids               []idRange
	overflowUID, overflowGID uint32
}

// idRange is one line of /proc/<pid>/uid_map or gid_map.
type idRange struct {
	inside, outside, count uint64
}

// currentNS is this process's user namespace. A process cannot change it
// once it has threads (setns(2) and unshare(2) of CLONE_NEWUSER refuse),
// so it is read once.
var currentNS = sync.OnceValue(func() userNS {
	ns := userNS{overflowUID: 65534, overflowGID: 65534}
	if data, err := os.ReadFile("/proc/self/uid_map"); err == nil {
		ns.uids = parseIDMap(data)
	}
	if data, err := os.ReadFile("/proc/self/gid_map"); err == nil {
		ns.gids = parseIDMap(data)
	}
	if id, ok := readID("/proc/sys/kernel/overflowuid"); ok {
		ns.overflowUID = id
	}
	if id, ok := readID("/proc/sys/kernel/overflowgid"); ok {
		ns.overflowGID = id
	}
	if ns.uids == nil || ns.gids == nil { // no /proc: assume the host's
		ns.uids = []idRange{{0, 0, 1<<32 - 1}}
		ns.gids = ns.uids
	}
	return ns
})

// parseIDMap parses user_namespaces(7)'s uid_map format: "inside outside
// count" per line. Malformed lines are skipped.
func parseIDMap(data []byte) []idRange {
	out := []idRange{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		var r idRange
		var err1, err2, err3 error
		r.inside, err1 = strconv.ParseUint(f[0], 10, 32)
		r.outside, err2 = strconv.ParseUint(f[1], 10, 32)
		r.count, err3 = strconv.ParseUint(f[2], 10, 33)
		if err1 == nil && err2 == nil && err3 == nil {
			out = append(out, r)
		}
	}
	return out
}

func readID(path string) (uint32, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 32)
	return uint32(n), err == nil
}

// initial reports whether this is the initial user namespace (the host's),
// where every id maps to itself.
func (ns userNS) initial() bool {
	full := []idRange{{0, 0, 1<<32 - 1}}
	return slices.Equal(ns.uids, full) && slices.Equal(ns.gids, full)
}

// oneID reports whether the namespace maps exactly one uid and one gid, as
// `unshare -r` and rootless sandcell make it: files cannot be given any
// other owner.
func (ns userNS) oneID() bool {
	return total(ns.uids) == 1 && total(ns.gids) == 1
}

// unmappedUID reports whether stat(2) showing uid means the owner is a
// host id this namespace does not map (so its true value is unknown).
func (ns userNS) unmappedUID(uid uint32) bool {
	return uid == ns.overflowUID && !ns.initial() && !mapped(ns.uids, uid)
}

// unmappedGID is unmappedUID for groups.
func (ns userNS) unmappedGID(gid uint32) bool {
	return gid == ns.overflowGID && !ns.initial() && !mapped(ns.gids, gid)
}

func mapped(rs []idRange, id uint32) bool {
	for _, r := range rs {
		if uint64(id) >= r.inside && uint64(id)-r.inside < r.count {
			return true
		}
	}
	return false
}

func total(rs []idRange) uint64 {
	var n uint64
	for _, r := range rs {
		n += r.count
	}
	return n
}
