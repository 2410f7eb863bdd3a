package schedule

import "sort"

// Placement of a whole gang.
//
// Every pod class (pod sets with equal requests and constraints are merged
// into one class) is a number of identical pods, so how many pods of a class
// a node takes is exact: min over resources of free/request. Classes are
// packed first-fit-decreasing (largest pods first) over their candidate
// nodes in cluster order; with up to four classes every order is tried, so
// the usual Master+Worker or Launcher+Worker jobs are packed exactly. The
// cost is O(classes x candidate nodes x requested resources) per order.

// class is one packable pod class.
type class struct {
	sets  []int   // pod set indices merged into this class
	need  int     // pods to place
	req   []int64 // per job resource (diag.resList)
	nodes []int32 // candidate nodes, cluster order
}

// placement is where pods went: for each class, (node, pods) pairs.
type placement struct {
	placed []int
	where  [][]nodeCount
}

type nodeCount struct {
	node int32
	pods int
}

// capFunc gives the capacity of node n for job resource k.
type capFunc func(n int32, k int) int64

// pack places every class's pods, trying class orders. It returns the best
// placement found and whether it placed everything.
func pack(classes []class, nres, nnodes int, capOf capFunc) (placement, bool) {
	off := make([]int32, nnodes)
	for i := range off {
		off[i] = -1
	}
	var used []int32
	for _, cl := range classes {
		for _, n := range cl.nodes {
			if off[n] < 0 {
				off[n] = int32(len(used))
				used = append(used, n)
			}
		}
	}
	base := make([]int64, len(used)*nres)
	for i, n := range used {
		for k := 0; k < nres; k++ {
			base[i*nres+k] = capOf(n, k)
		}
	}
	buf := make([]int64, len(base))

	order := make([]int, len(classes))
	for i := range order {
		order[i] = i
	}
	// Largest pods first: GPU units, then the other requests in order.
	sort.SliceStable(order, func(a, b int) bool {
		ra, rb := classes[order[a]].req, classes[order[b]].req
		for k := range ra {
			if ra[k] != rb[k] {
				return ra[k] > rb[k]
			}
		}
		return false
	})
	orders := [][]int{order}
	if len(classes) > 1 && len(classes) <= 4 {
		orders = permutations(order)
	}
	var best placement
	bestTotal := -1
	for _, ord := range orders {
		copy(buf, base)
		p := placement{placed: make([]int, len(classes)), where: make([][]nodeCount, len(classes))}
		total, complete := 0, true
		for _, ci := range ord {
			cl := &classes[ci]
			left := cl.need
			for _, n := range cl.nodes {
				if left == 0 {
					break
				}
				row := buf[int(off[n])*nres : int(off[n])*nres+nres]
				k := left
				for r, q := range cl.req {
					if q <= 0 {
						continue
					}
					if fit := row[r] / q; int64(k) > fit {
						k = int(fit)
					}
				}
				if k <= 0 {
					continue
				}
				for r, q := range cl.req {
					row[r] -= int64(k) * q
				}
				p.where[ci] = append(p.where[ci], nodeCount{node: n, pods: k})
				left -= k
			}
			p.placed[ci] = cl.need - left
			total += p.placed[ci]
			if left > 0 {
				complete = false
			}
		}
		if complete {
			return p, true
		}
		if total > bestTotal {
			best, bestTotal = p, total
		}
	}
	return best, false
}

func permutations(a []int) [][]int {
	var out [][]int
	var rec func(k int)
	cur := append([]int(nil), a...)
	rec = func(k int) {
		if k == len(cur) {
			out = append(out, append([]int(nil), cur...))
			return
		}
		for i := k; i < len(cur); i++ {
			cur[k], cur[i] = cur[i], cur[k]
			rec(k + 1)
			cur[k], cur[i] = cur[i], cur[k]
		}
	}
	rec(0)
	return out
}
