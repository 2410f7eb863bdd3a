package launcher

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTorchrunNproc(t *testing.T) {
	tests := []struct {
		name string
		argv string
		env  string // PET_NPROC_PER_NODE
		n    int
		from string
		ok   bool
	}{
		{"dash form with =", "torchrun --nproc-per-node=4 train.py", "", 4, "--nproc-per-node", true},
		{"underscore form, separate value", "torchrun --nnodes 2 --nproc_per_node 8 train.py", "", 8, "--nproc_per_node", true},
		{"path to torchrun", "/opt/conda/bin/torchrun --standalone --nproc-per-node 2 -m pkg.train", "", 2, "--nproc-per-node", true},
		{"python -m torch.distributed.run", "python3 -m torch.distributed.run --nproc_per_node=3 train.py", "", 3, "--nproc_per_node", true},
		{"legacy launch module", "python -u -m torch.distributed.launch --nproc_per_node 2 train.py", "", 2, "--nproc_per_node", true},
		{"flag wins over env", "torchrun --nproc-per-node=2 train.py", "8", 2, "--nproc-per-node", true},
		{"env when the flag is absent", "torchrun --rdzv-backend c10d train.py", "4", 4, "PET_NPROC_PER_NODE", true},
		{"the script's own flag is not torchrun's", "torchrun train.py --nproc-per-node 16", "", 0, "", false},
		{"gpu means one per GPU", "torchrun --nproc-per-node gpu train.py", "", 0, "--nproc-per-node", true},
		{"torchrun inside a shell line: env only", "sh -c torchrun-train.sh", "2", 2, "PET_NPROC_PER_NODE", true},
		{"not torchrun", "python train.py", "4", 0, "", false},
		{"not torchrun, no env", "mpirun -np 4 python train.py", "", 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "PET_NPROC_PER_NODE" {
					return tt.env
				}
				return ""
			}
			info, ok := torchrunNproc(strings.Fields(tt.argv), getenv)
			require.Equal(t, tt.ok, ok)
			require.Equal(t, tt.n, info.n)
			require.Equal(t, tt.from, info.from)
		})
	}
}

func TestMpirunNP(t *testing.T) {
	tests := []struct {
		argv  string
		np    int
		over  bool
		isMPI bool
	}{
		{"mpirun -np 8 python train.py", 8, false, true},
		{"mpirun --allow-run-as-root -x NCCL_DEBUG=INFO --mca pml ob1 -n 16 python train.py", 16, false, true},
		{"mpiexec --np=4 ./a.out", 4, false, true},
		{"mpirun --oversubscribe -np 64 ./a.out", 64, true, true},
		{"mpirun --map-by ppr:8:node:OVERSUBSCRIBE -np 64 ./a.out", 64, true, true},
		{"mpirun --hostfile /etc/mpi/hostfile python train.py -n 5", 0, false, true},
		{"/usr/bin/mpirun -bind-to none -map-by slot -np 2 python x.py --oversubscribe", 2, false, true},
		{"python train.py -np 4", 0, false, false},
	}
	for _, tt := range tests {
		np, over, isMPI := mpirunNP(strings.Fields(tt.argv))
		require.Equal(t, tt.np, np, tt.argv)
		require.Equal(t, tt.over, over, tt.argv)
		require.Equal(t, tt.isMPI, isMPI, tt.argv)
	}
}
