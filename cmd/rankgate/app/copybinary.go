package app

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/rankgate/rankgate/verdict"
)

func (a *App) newCopyBinaryCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "copy-binary DIR",
		Short: "Copy this rankgate binary to DIR/rankgate (init container of a gated MPIJob launcher)",
		Long: `copy-binary copies the running rankgate binary to DIR/rankgate, mode 0755,
through a temporary file and a rename, so that a container that does not
ship rankgate can run it from a shared emptyDir: the MPIJob launcher gate
runs it in an init container of the controller's image (which has no shell)
and wraps the launcher's command in DIR/rankgate launch --gang.`,
		Example: `  rankgate copy-binary /rankgate/bin`,
		Args:    cobra.ExactArgs(1),
		RunE:    func(_ *cobra.Command, args []string) error { return a.copyBinary(args[0]) },
	}
}

func (a *App) copyBinary(dir string) error {
	self, err := os.Executable()
	if err != nil {
		return verdict.WithCode(verdict.ExitEnvironment, fmt.Errorf("finding this binary: %w", err))
	}
	dst := filepath.Join(dir, "rankgate")
	if err := copyFile(self, dst); err != nil {
		return verdict.WithCode(verdict.ExitEnvironment, fmt.Errorf("copying %s to %s: %w", self, dst, err))
	}
	fmt.Fprintf(a.Streams.Err, "rankgate: copied %s to %s\n", self, dst)
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".rankgate-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
