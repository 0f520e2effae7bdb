package batch

import "github.com/sandcell/sandcell/api"

// Sentinels of batch merge, in class api.ErrInvalid: the shard files do
// not add up to the input, and merging them anyway would give a wrong
// count (a line counted twice, or a pass@k over fewer samples than asked).
var (
	ErrDuplicate = api.Invalid("an id has results in two places")
	ErrMissing   = api.Invalid("ids of the input have no result")
	ErrUnknown   = api.Invalid("results for ids that are not in the input")
	ErrTorn      = api.Invalid("a results file ends in a torn line")
)
