//! Separate "hosts" on one machine: network namespaces joined by a veth link, each with its own
//! address, for the tests of ranks on several hosts. Needs root and `ip` (iproute2); without them
//! [`Hosts::pair`] returns `None` (the test says it was skipped), unless `FFN_REQUIRE_NETNS=1`
//! (CI), where their absence fails the test.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The subnet of every pair (namespaces are separate networks, so pairs may share it).
const SUBNET: &str = "10.77.0";

/// Two network namespaces joined by one veth link; removed on drop.
pub struct Hosts {
    /// Namespace names, host 0 first.
    pub names: [String; 2],
    /// Each host's address on the link.
    pub addrs: [String; 2],
    /// Each host's end of the link.
    pub links: [String; 2],
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Hosts {
    /// Creates the two hosts, or says why it cannot (and panics instead under
    /// `FFN_REQUIRE_NETNS=1`).
    pub fn pair(test: &str) -> Option<Hosts> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let id = format!(
            "{}{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let hosts = Hosts {
            names: [format!("ffn-{id}-h0"), format!("ffn-{id}-h1")],
            addrs: [format!("{SUBNET}.1"), format!("{SUBNET}.2")],
            links: [format!("fv{id}a"), format!("fv{id}b")],
        };
        match hosts.create() {
            Ok(()) => Some(hosts),
            Err(e) if std::env::var("FFN_REQUIRE_NETNS").as_deref() == Ok("1") => {
                panic!("{test}: FFN_REQUIRE_NETNS=1 but network namespaces are unavailable: {e}")
            }
            Err(e) => {
                eprintln!(
                    "{test}: SKIPPED (needs root and iproute2; set FFN_REQUIRE_NETNS=1 to fail instead): {e}"
                );
                None
            }
        }
    }

    fn create(&self) -> Result<(), String> {
        for n in &self.names {
            ip(&["netns", "add", n])?;
        }
        ip(&[
            "link",
            "add",
            &self.links[0],
            "type",
            "veth",
            "peer",
            "name",
            &self.links[1],
        ])?;
        for h in 0..2 {
            let (ns, link) = (&self.names[h], &self.links[h]);
            ip(&["link", "set", link, "netns", ns])?;
            let addr = format!("{}/24", self.addrs[h]);
            ip(&["-n", ns, "addr", "add", &addr, "dev", link])?;
            ip(&["-n", ns, "link", "set", link, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(())
    }

    /// `program args` inside host `h`'s namespace.
    pub fn command(&self, h: usize, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[h], program]);
        c
    }

    /// Takes host `h`'s end of the link down: from then on no packet passes.
    pub fn cut_link(&self, h: usize) {
        ip(&["-n", &self.names[h], "link", "set", &self.links[h], "down"])
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth link, and with it the other end.
        for n in &self.names {
            let _ = ip(&["netns", "del", n]);
        }
    }
}
