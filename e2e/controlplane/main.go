// Command testplane is a multi-call binary holding the parts of a real Kubernetes
// control plane that the e2e tests need: embedded etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, the kubelet of the real node (e2e/harness/node.ts), and
// kubectl (e2e/harness/kubectl.ts: the tests' and the demo's `kubectl logs/exec/port-forward`).
// Exactly one component runs per process; the TypeScript harness (e2e/harness) starts each one as
// its own child process.
//
// Usage: testplane <etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl|version> [flags]
// A symlink named after a component works too (argv[0] dispatch).
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	_ "time/tzdata"

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/component-base/version"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const components = "etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl|version"

func main() {
	component, args := filepath.Base(os.Args[0]), os.Args[1:]
	switch component {
	case "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl":
	default:
		if len(args) == 0 {
			fmt.Fprintf(os.Stderr, "usage: %s <%s> [flags]\n", component, components)
			os.Exit(2)
		}
		component, args = args[0], args[1:]
	}
	exitWithParent()
	switch component {
	case "etcd":
		// etcdmain.Main treats its first element as the program name.
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-scheduler":
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kubelet":
		// 1.36 takes a context; the kubelet also stops on SIGTERM (see exitWithParent).
		cmd := kubelet.NewKubeletCommand(context.Background())
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kubectl":
		// kubectl reads os.Args itself (plugins, -v): make them what a kubectl binary gets.
		os.Args = append([]string{"kubectl"}, args...)
		logs.GlogSetter(kubectlcmd.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectlcmd.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
	case "version":
		fmt.Println(version.Get().GitVersion)
	default:
		fmt.Fprintf(os.Stderr, "unknown component %q; want one of %s\n", component, components)
		os.Exit(2)
	}
}

// exitWithParent stops this component when the process named by TESTPLANE_PARENT_PID (the
// test harness that started it) is gone, so that a harness killed with SIGKILL, which cannot
// clean up, leaves no control plane running. The component gets SIGTERM first (a normal
// shutdown), and is made to exit after 10 s if it is still there.
func exitWithParent() {
	parent, err := strconv.Atoi(os.Getenv("TESTPLANE_PARENT_PID"))
	if err != nil || parent <= 1 {
		return
	}
	go func() {
		for {
			time.Sleep(time.Second)
			if os.Getppid() == parent {
				continue
			}
			fmt.Fprintf(os.Stderr, "testplane: parent process %d is gone; shutting down\n", parent)
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			time.Sleep(10 * time.Second)
			os.Exit(3)
		}
	}()
}
