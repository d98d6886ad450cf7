//! The way of one request that does not take the direct path (`direct`): an ordered list of steps, each of which
//! either passes the command on or answers it (or parks it) and ends its way. `Session::steps` is the list; each
//! step is a short method here that calls into the file of its concern.
//!
//! Around the steps: `CLIENT REPLY SKIP` mutes the command's reply, and the tenant's monitors are shown the
//! command once it ran (see `monitor`).

use std::ops::ControlFlow::{self, Break, Continue};
use std::time::Instant;

use super::{NOAUTH, Session, info};
use crate::cmd::{self, CommandSpec, Policy};
use crate::failure::Failure;
use crate::family::Family;
use crate::reply::{Transform, chain};
use crate::resp::Request;
use crate::route::Dispatch;

/// A command on its way: its request (rewritten by the steps that rewrite it), when it arrived, its table entry
/// and how the gateway serves it, and how its reply is rewritten for the tenant.
pub(super) struct Command {
    pub(super) request: Request,
    pub(super) started: Instant,
    pub(super) spec: &'static CommandSpec,
    pub(super) policy: Policy,
    pub(super) transform: Option<Transform>,
}

/// What a step returns: the command for the next step, or `Break` once it was answered or parked.
type Step = ControlFlow<(), Command>;

impl Session {
    /// Dispatches `request` through the steps; a client whose tenant has monitors shows it to them once it ran.
    pub(super) fn dispatch(&mut self, request: Request, started: Instant) {
        let shown = self.client.monitor_args(&request);
        let skipped = self.client.skip_reply();
        let _ = self.steps(request, started);
        let parked = self.stateful.parked.is_some();
        self.client.end_skip(skipped, parked);
        // A request parked for later is shown when it goes.
        if let Some(args) = shown.filter(|_| !parked) {
            self.client.show_to_monitors(&args, self.monitor.is_some());
        }
    }

    /// The steps, in the order they run.
    fn steps(&mut self, request: Request, started: Instant) -> ControlFlow<()> {
        let command = self.look_up(request, started)?;
        let command = self.wait_for_routes(command)?;
        let command = self.follow_tenant(command)?;
        let command = self.authenticate(command)?;
        let command = self.park(command)?;
        let command = self.police(command)?;
        let command = self.in_monitor_mode(command)?;
        let command = self.rate_limit(command)?;
        let command = self.track_reads(command)?;
        let command = self.near_cache(command)?;
        let command = self.serve_stateful(command)?;
        let command = self.serve_locally(command)?;
        let command = self.narrow_step(command)?;
        let command = self.publish_ordered(command)?;
        self.forward(command);
        Continue(())
    }

    /// The command's table entry: an unknown command or a wrong number of arguments is answered with Redis'
    /// error (and fails an open transaction).
    fn look_up(&mut self, request: Request, started: Instant) -> Step {
        match self.client.commands.lookup(request.args()) {
            Ok((spec, policy)) => {
                self.client.replies.set_family(spec.family());
                self.client.info.set_command(spec.id);
                Continue(Command {
                    request,
                    started,
                    spec,
                    policy,
                    transform: None,
                })
            }
            Err(e) => {
                self.client.replies.set_family(Family::Other);
                self.stateful.fail_transaction();
                // Byte-exact: the error echoes the client's arguments, which need not be UTF-8.
                self.client.local_reply(started, |out| e.write_reply(out));
                Break(())
            }
        }
    }

    /// Before its first routes the gateway serves nothing (but `QUIT`).
    fn wait_for_routes(&mut self, command: Command) -> Step {
        if self.client.worker.gateway.generation() == 0 && command.spec.id != cmd::Command::Quit {
            let failure = Failure::Gateway(
                "ERR the gateway has no routes yet (waiting for the control plane)",
            );
            self.client.fail(command.started, &failure);
            return Break(());
        }
        Continue(command)
    }

    /// The tenant as the current snapshot has it: a revoked credential or a removed tenant closes the
    /// connection, unanswered.
    fn follow_tenant(&mut self, command: Command) -> Step {
        self.refresh_tenant();
        if self.client.closing {
            return Break(());
        }
        Continue(command)
    }

    /// Without a tenant only `AUTH`, `HELLO` and `QUIT` are served.
    fn authenticate(&mut self, command: Command) -> Step {
        if self.client.tenant.is_some() {
            return Continue(command);
        }
        let (args, started) = (command.request.args(), command.started);
        match command.spec.id {
            cmd::Command::Auth => self.auth(started, args),
            cmd::Command::Hello => self.hello(started, args),
            cmd::Command::Quit => self.client.quit(started),
            _ => self.client.local_error(started, NOAUTH),
        }
        Break(())
    }

    /// A command that must wait for every earlier reply to be written waits (see `stateful`).
    fn park(&mut self, command: Command) -> Step {
        let args = command.request.args();
        if self.stateful.must_park(&self.client, command.spec, args) {
            self.stateful.parked = Some(command.request);
            return Break(());
        }
        Continue(command)
    }

    /// The tenant's policies: refused, or run in another form (see `policies`).
    fn police(&mut self, command: Command) -> Step {
        let Command { request, spec, .. } = command;
        match self.client.policed(spec, request) {
            Ok((spec, request)) => Continue(Command {
                request,
                spec,
                ..command
            }),
            Err(text) => {
                // An open transaction fails at `EXEC` (`EXECABORT`), as Redis fails one whose command was
                // refused at queue time.
                self.stateful.fail_transaction();
                self.client
                    .reject(spec, command.started, &Failure::refused(text));
                Break(())
            }
        }
    }

    /// A client in `MONITOR` mode may run only what Redis lets a monitor run.
    fn in_monitor_mode(&mut self, command: Command) -> Step {
        if self.monitor.is_some() && self.client.monitor_mode(command.spec, command.started) {
            return Break(());
        }
        Continue(command)
    }

    /// Counted among the tenant's commands, then held to its commands per second.
    fn rate_limit(&mut self, command: Command) -> Step {
        let Some(view) = &self.client.tenant else {
            return Break(());
        };
        let tenant = &view.tenant;
        tenant.runtime.counters.commands.add(command.spec.id, 1);
        if tenant.admit_op(command.started) {
            return Continue(command);
        }
        let text = format!("ERR tenant '{}' rate limit exceeded", tenant.name);
        self.client
            .reject(command.spec, command.started, &Failure::refused(text));
        Break(())
    }

    /// A tracking client's reads are tracked from before they are sent, or answered from the near cache (see
    /// `client_tracking`).
    fn track_reads(&mut self, command: Command) -> Step {
        if self.caching.is_on() {
            let in_transaction = self.stateful.transaction.is_some();
            let args = command.request.args();
            self.caching
                .note_reads(&mut self.client, command.spec, args, in_transaction);
        }
        Continue(command)
    }

    /// The tenant's near cache (see `near`): a read it holds is answered, a write drops the keys it names.
    fn near_cache(&mut self, command: Command) -> Step {
        if self
            .client
            .tenant
            .as_ref()
            .is_some_and(|v| v.near.is_some())
        {
            return self.through_near_cache(command);
        }
        Continue(command)
    }

    /// Transactions, subscriptions and blocking commands, and every command while in a transaction or
    /// subscribed (see `stateful`).
    fn serve_stateful(&mut self, command: Command) -> Step {
        let stateless = self.stateful.transaction.is_none() && self.stateful.subscription.is_none();
        if command.policy != Policy::Stateful && stateless {
            return Continue(command);
        }
        let (spec, started) = (command.spec, command.started);
        if spec.id == cmd::Command::Reset {
            self.reset(started);
            self.stateful.publish_state(&self.client.info);
            return Break(());
        }
        match self
            .stateful
            .command(&mut self.client, spec, &command.request, started)
        {
            true => Break(()),
            false => Continue(command),
        }
    }

    /// What the gateway answers itself (see `local`).
    fn serve_locally(&mut self, command: Command) -> Step {
        if command.policy == Policy::Local
            && self.local_command(command.spec, &command.request, command.started)
        {
            return Break(());
        }
        Continue(command)
    }

    /// Refused, or renamed into the tenant's key namespace, databases and channels (see `narrow`).
    fn narrow_step(&mut self, command: Command) -> Step {
        match self.client.narrow(command.spec, command.request) {
            Ok((request, transform)) => Continue(Command {
                request,
                transform: chain(command.transform, transform),
                ..command
            }),
            Err(text) => {
                self.client
                    .reject(command.spec, command.started, &Failure::refused(text));
                Break(())
            }
        }
    }

    /// A RESP3 subscriber's `PUBLISH` to its own node goes over its subscription (see `pubsub`).
    fn publish_ordered(&mut self, command: Command) -> Step {
        if self.stateful.subscription.is_some()
            && self.stateful.publish_in_order(
                &mut self.client,
                command.spec,
                &command.request,
                command.started,
            )
        {
            return Break(());
        }
        Continue(command)
    }

    /// Along the tenant's route (see `route::Dispatch`), counted against a migration's destination first (see
    /// `readiness`); `INFO` and `CONFIG RESETSTAT` are the gateway's figures, `SCRIPT KILL` goes to every node
    /// that runs the tenant's scripts.
    fn forward(&mut self, command: Command) {
        let Command {
            request,
            started,
            spec,
            transform,
            ..
        } = command;
        self.client.check_readiness(spec, request.args());
        self.client.replies.tag(Some(request.raw())); // its slot keeps it for `tracking`
        let Some(view) = &self.client.tenant else {
            return;
        };
        let mut dispatch = Dispatch {
            plan: &view.tenant.route,
            route: &view.route,
            replies: &self.client.replies,
            affinity: self.client.info.id as usize,
            random: &self.client.random,
            keys: &mut self.client.keys,
            places: &mut self.client.places,
            scripts_run_as: &view.tenant.scripts_run_as,
            script_limit_ms: view.tenant.limits.script_limit_ms(),
            transform,
        };
        let sent = match spec.id {
            cmd::Command::Info => info::info(
                &mut dispatch,
                &self.client.worker.gateway,
                &view.tenant,
                spec,
                &request,
                started,
                self.client.protocol,
            ),
            cmd::Command::ConfigResetstat => {
                info::resetstat(&mut dispatch, &view.tenant, spec, &request, started)
            }
            cmd::Command::ScriptKill | cmd::Command::FunctionKill => {
                dispatch.kill_scripts(&request, started);
                Ok(())
            }
            _ => dispatch.forward(spec, &request, started),
        };
        self.client.replies.tag(None); // a request that opened no slot leaves none to the next
        if let Err(text) = sent {
            self.client.reject(spec, started, &Failure::refused(text));
        }
    }
}
