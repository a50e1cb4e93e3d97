//! The per-server lifecycle task: the only code that moves a server between
//! CONNECTING, CONNECTED, ERROR and DISCONNECTED (always through the
//! registry, which checks the state machine).

use std::sync::Arc;
use tokio::sync::{mpsc, watch};

use super::discovery::{self, What};
use super::events::{EventSender, SessionEvent, event_channel};
use super::health;
use super::inbound_channel;
use super::link::Link;
use super::revision::RevisionId;
use super::session::{Handshake, Session};
use super::vitals::Vitals;
use super::{Command, Shared, http, sse, stdio};
use crate::model::health::{CheckOutcome, Verdict};
use crate::model::{ServerId, ServerNotice, ServerRecord, ServerStatus, StatusTrigger, Transport};
use crate::registry::RegistryError;

enum Connected {
    /// The admin disconnected it; `want` stays off until the next connect.
    Disconnected,
    /// The link died; reconnect with backoff.
    Lost(String),
    /// Health checks failed too often: close it and reconnect with backoff.
    Unhealthy(String),
    /// The supervisor must end.
    Stopped,
}

/// How long after a server ended the list-change subscription it is opened
/// again; doubled (up to `LISTEN_AGAIN_MAX`) while subscriptions keep
/// ending within `LISTEN_QUICK_END` of being opened, so a server that ends
/// each at once is not subscribed to (and listed) in a loop.
const LISTEN_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(1);
const LISTEN_AGAIN_MAX: std::time::Duration = std::time::Duration::from_secs(60);
const LISTEN_QUICK_END: std::time::Duration = std::time::Duration::from_secs(10);
/// The shortest time between two listings a server's change notices
/// cause: notices that come meanwhile are one listing, so a server that
/// announces a change a thousand times a second is listed once a second.
const CHANGES_MIN_GAP: std::time::Duration = std::time::Duration::from_secs(1);

pub(super) async fn run(
    shared: Arc<Shared>,
    id: ServerId,
    mut commands: mpsc::UnboundedReceiver<Command>,
    publish: watch::Sender<Option<Arc<Session>>>,
) {
    // However the task ends, nobody waits on this server's start-up.
    let _started = StartedOnDrop(Arc::clone(&shared), id);
    let mut want = false;
    let mut failures: usize = 0;
    // Sessions lost in a row soon after connecting: a server that connects
    // and then dies at once backs off as one that fails to connect does.
    let mut quick_losses: usize = 0;
    loop {
        if !want {
            match commands.recv().await {
                Some(Command::Connect) => want = true,
                // Not connected: a status the failing store kept saying
                // otherwise (a disconnect it could not record) is put right.
                Some(Command::Relist) => write_disconnected_again(&shared, id).await,
                Some(Command::Disconnect { reply, .. }) => {
                    let _ = reply.send(0);
                }
                Some(Command::Stop { reply }) => {
                    let _ = reply.send(());
                    return;
                }
                None => return,
            }
            continue;
        }

        let record = match shared.registry.get(&id.to_string()).await {
            Ok(record) => record,
            Err(RegistryError::NotFound(_)) => return,
            Err(err) => {
                tracing::error!(server = %id, "cannot read the registration: {err}");
                return;
            }
        };
        let name = record.name.clone();
        let vitals = shared.vitals(&record);
        vitals.attempt_started();
        if record.status != ServerStatus::Connecting {
            let trigger = if record.status == ServerStatus::Error {
                StatusTrigger::Reconnect
            } else {
                StatusTrigger::Connect
            };
            set_status(&shared, id, ServerStatus::Connecting, trigger, None).await;
        }

        // The revision the server spoke at its last connect (kept in the
        // store) is tried first; a server never connected is probed.
        let first = record
            .protocol_version
            .as_deref()
            .map_or(RevisionId::Rev2026, RevisionId::of_version);
        let (events_tx, mut events) = event_channel();
        let attempt = open_session(&shared, &record, events_tx, first);
        tokio::pin!(attempt);
        let mut stop_reply = None;
        let result = loop {
            tokio::select! {
                result = &mut attempt => break Some(result),
                command = commands.recv() => match command {
                    Some(Command::Connect | Command::Relist) => {}
                    Some(Command::Disconnect { reply, .. }) => {
                        let _ = reply.send(0);
                        break None;
                    }
                    Some(Command::Stop { reply }) => {
                        stop_reply = Some(reply);
                        break None;
                    }
                    None => break None,
                },
            }
        };
        let Some(result) = result else {
            // Dropping the attempt closes whatever it had opened.
            set_status(
                &shared,
                id,
                ServerStatus::Disconnected,
                StatusTrigger::Disconnect,
                Some("connection attempt cancelled".into()),
            )
            .await;
            shared.started(id);
            want = false;
            if let Some(reply) = stop_reply {
                let _ = reply.send(());
                return;
            }
            continue;
        };

        let session = match result {
            Ok(session) => session,
            Err(reason) => {
                // A server waiting for a login is not retried: it waits
                // for the login (or an admin's connect).
                let login = shared
                    .oauth
                    .get()
                    .and_then(|oauth| oauth.for_server(&record))
                    .filter(|auth| auth.needs_login());
                let reason = match &login {
                    Some(_) => crate::oauth::needs_login_message(&name),
                    None => reason,
                };
                // Shown in the API, the history and the log: no credential
                // a URL carried may be in it.
                let reason = crate::model::redact::shown_reason(&reason);
                tracing::warn!(server = %name, "connection failed: {reason}");
                vitals.attempt_failed();
                let message = reason.clone();
                set_status_with(
                    &shared,
                    id,
                    ServerStatus::Error,
                    StatusTrigger::ConnectFailed,
                    Some(reason),
                    move |r| r.error_message = Some(message),
                )
                .await;
                shared.started(id);
                let waited = match login {
                    Some(auth) => wait_for_login(&shared, &mut commands, &auth, id).await,
                    None => wait_before_retry(&shared, &mut commands, failures, id).await,
                };
                match waited {
                    Retry::Now => {
                        failures += 1;
                        continue;
                    }
                    Retry::Disconnected => {
                        want = false;
                        failures = 0;
                        continue;
                    }
                    Retry::Stop => return,
                }
            }
        };

        failures = 0;
        let connected_at = std::time::Instant::now();
        vitals.reset_for_session();
        let pid = session.pid();
        // Whoever sees CONNECTED and looks for this server's tools waits
        // (bounded) for the discovery below instead of finding nothing.
        shared.starting(id);
        record_connected(&shared, id, &session).await;
        tracing::info!(server = %name, protocol = session.protocol_version(), pid, "connected");
        publish.send_replace(Some(Arc::clone(&session)));
        // Always list right after connecting: a list_changed sent before we
        // were listening would otherwise be lost. A disconnect or stop that
        // comes meanwhile is not kept waiting for a slow list.
        let interrupted = discover_answering(
            &shared,
            id,
            &session,
            &mut commands,
            discovery::discover(&session, id, &shared.catalog, What::Everything),
        )
        .await;
        shared.started(id);
        if let Some(command) = interrupted
            && let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await
        {
            match outcome {
                Connected::Stopped => return,
                _ => {
                    want = false;
                    continue;
                }
            }
        }

        // A server that cannot say its lists changed is listed again when
        // the lifetime it gave them ends (`ttlMs`).
        let mut relist = session
            .relist_after()
            .map(|after| tokio::time::Instant::now() + after);
        let mut monitor = Monitor::new(&shared, &record, &vitals);
        // The list-change subscription: when it was opened, and when it is
        // to be opened again after the server ended it.
        let mut listening_since = tokio::time::Instant::now();
        let mut listen_wait = LISTEN_AGAIN_AFTER;
        let mut listen_again: Option<tokio::time::Instant> = None;
        // Change notices not listed yet: what to list, what to announce,
        // and when (`CHANGES_MIN_GAP` after the last such listing).
        let mut changed: Option<(What, Vec<&'static str>)> = None;
        let mut changes_due = tokio::time::Instant::now();
        let mut changes_listed: Option<tokio::time::Instant> = None;
        let outcome = loop {
            tokio::select! {
                () = session.closed() => break Connected::Lost(session.close_reason()),
                () = tokio::time::sleep_until(monitor.next), if monitor.check.is_none() => {
                    if let Some(passed) = monitor.due(&shared, &session, &record)
                        && let Some(reason) = monitor.judge(&shared, id, &name, passed, None).await
                    {
                        break Connected::Unhealthy(reason);
                    }
                }
                (outcome, took) = async {
                    match monitor.check.as_mut() {
                        Some(check) => check.await,
                        None => std::future::pending().await,
                    }
                } => {
                    monitor.check = None;
                    if let Some(reason) = monitor.judge(&shared, id, &name, outcome, Some(took)).await {
                        break Connected::Unhealthy(reason);
                    }
                }
                () = async { tokio::time::sleep_until(relist.unwrap_or_else(tokio::time::Instant::now)).await }, if relist.is_some() => {
                    if let Some(command) = discover_answering(&shared, id, &session, &mut commands, discovery::discover(&session, id, &shared.catalog, What::Everything)).await
                        && let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await
                    {
                        break outcome;
                    }
                    relist = session.relist_after().map(|after| tokio::time::Instant::now() + after);
                }
                () = async { tokio::time::sleep_until(listen_again.unwrap_or_else(tokio::time::Instant::now)).await }, if listen_again.is_some() => {
                    listen_again = None;
                    listening_since = tokio::time::Instant::now();
                    session.listen().await;
                    // Changes made while no subscription was open.
                    if let Some(command) = discover_answering(&shared, id, &session, &mut commands, discovery::discover(&session, id, &shared.catalog, What::Everything)).await
                        && let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await
                    {
                        break outcome;
                    }
                }
                () = async { tokio::time::sleep_until(changes_due).await }, if changed.is_some() => {
                    let Some((what, announced)) = changed.take() else { continue };
                    if let Some(command) = discover_answering(&shared, id, &session, &mut commands, discovery::discover(&session, id, &shared.catalog, what)).await
                        && let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await
                    {
                        break outcome;
                    }
                    changes_listed = Some(tokio::time::Instant::now());
                    // Listed again, then announced: the router tells the
                    // clients, who list what we just stored.
                    for method in announced {
                        shared.announce(id, method);
                    }
                }
                event = events.recv() => match event {
                    // Listed again (with the notices that come meanwhile),
                    // then announced.
                    Some(SessionEvent::ToolsChanged | SessionEvent::ResourcesChanged | SessionEvent::PromptsChanged | SessionEvent::EverythingChanged) => {
                        let (what, announced) = match event {
                            Some(SessionEvent::ToolsChanged) => (What::Tools, Some("notifications/tools/list_changed")),
                            Some(SessionEvent::ResourcesChanged) => (What::Resources, Some("notifications/resources/list_changed")),
                            Some(SessionEvent::PromptsChanged) => (What::Prompts, Some("notifications/prompts/list_changed")),
                            _ => (What::Everything, None),
                        };
                        let pending = changed.get_or_insert_with(|| {
                            changes_due = changes_listed.map_or_else(tokio::time::Instant::now, |at| at + CHANGES_MIN_GAP);
                            (what, Vec::new())
                        });
                        if pending.0 != what {
                            pending.0 = What::Everything;
                        }
                        if let Some(method) = announced && !pending.1.contains(&method) {
                            pending.1.push(method);
                        }
                    }
                    // Subscribed again (a moment later, and later still while
                    // subscriptions keep ending at once), and listed again:
                    // changes in between would be lost.
                    Some(SessionEvent::ListenEnded) if listen_again.is_none() => {
                        listen_wait = if listening_since.elapsed() < LISTEN_QUICK_END {
                            (listen_wait * 2).min(LISTEN_AGAIN_MAX)
                        } else {
                            LISTEN_AGAIN_AFTER
                        };
                        tracing::info!(server = %name, again_in = ?listen_wait, "the server ended its subscription to list changes; subscribing again");
                        listen_again = Some(tokio::time::Instant::now() + listen_wait);
                    }
                    Some(SessionEvent::ListenEnded) => {}
                    Some(SessionEvent::Notification(message)) => {
                        let _ = shared.notices.send(ServerNotice { server_id: id, message });
                    }
                    None => {}
                },
                command = commands.recv() => {
                    if matches!(command, Some(Command::Relist)) {
                        // The store failed writes meanwhile: the status and
                        // lists written then were lost.
                        write_connected_again(&shared, id, &session).await;
                        if let Some(command) = discover_answering(&shared, id, &session, &mut commands, discovery::discover(&session, id, &shared.catalog, What::Everything)).await
                            && let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await
                        {
                            break outcome;
                        }
                    } else if let Some(outcome) = on_command(&shared, id, &name, &session, &publish, command).await {
                        break outcome;
                    }
                }
            }
        };
        let lost = match outcome {
            Connected::Disconnected => None,
            Connected::Stopped => return,
            Connected::Lost(reason) => Some((StatusTrigger::Failure, reason)),
            Connected::Unhealthy(reason) => Some((StatusTrigger::HealthFailed, reason)),
        };
        match lost {
            None => want = false,
            Some((trigger, reason)) => {
                let reason = crate::model::redact::shown_reason(&reason);
                publish.send_replace(None);
                session.close().await;
                let lasted = connected_at.elapsed() >= STABLE_SESSION;
                let waits = if lasted { 0 } else { quick_losses };
                quick_losses = if lasted { 0 } else { quick_losses + 1 };
                if trigger == StatusTrigger::HealthFailed {
                    tracing::warn!(server = %name, backoff_step = waits, "unhealthy, reconnecting: {reason}");
                } else {
                    tracing::warn!(server = %name, backoff_step = waits, "connection lost: {reason}");
                }
                let message = reason.clone();
                let checked = (trigger == StatusTrigger::HealthFailed).then(chrono::Utc::now);
                set_status_with(
                    &shared,
                    id,
                    ServerStatus::Error,
                    trigger,
                    Some(reason),
                    move |r| {
                        r.error_message = Some(message);
                        if checked.is_some() {
                            r.last_health_check = checked;
                        }
                    },
                )
                .await;
                match wait_before_retry(&shared, &mut commands, waits, id).await {
                    Retry::Now => failures = 1,
                    Retry::Disconnected => {
                        want = false;
                        quick_losses = 0;
                    }
                    Retry::Stop => return,
                }
            }
        }
    }
}

/// A session that lasted this long was a working one: losing it starts
/// the back-off again from its first step.
const STABLE_SESSION: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs a discovery while answering commands: a connect (it is connected
/// already) waits for the discovery's end; a disconnect or a stop ends the
/// discovery (a list cut short stores nothing) and is returned to be
/// carried out. A slow or silent server's lists can take many request
/// timeouts, which must not hold up its removal.
async fn discover_answering(
    shared: &Shared,
    id: ServerId,
    session: &Session,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    discovery: impl std::future::Future<Output = ()>,
) -> Option<Option<Command>> {
    let mut discovery = std::pin::pin!(discovery);
    let mut connect_asked = false;
    let mut relist_asked = false;
    let interrupted = loop {
        tokio::select! {
            () = &mut discovery => break None,
            command = commands.recv() => match command {
                Some(Command::Connect) => connect_asked = true,
                // Listing already: what it finds is written now; the
                // status written before it may not have been.
                Some(Command::Relist) => relist_asked = true,
                other => break Some(other),
            },
        }
    };
    if connect_asked {
        shared.started(id);
    }
    if relist_asked && interrupted.is_none() {
        write_connected_again(shared, id, session).await;
    }
    interrupted
}

/// Writes DISCONNECTED for a server with no session whose stored status
/// still says it is up.
async fn write_disconnected_again(shared: &Shared, id: ServerId) {
    let stored = shared.registry.get(&id.to_string()).await.ok();
    if stored.is_some_and(|r| r.status.is_available() || r.status == ServerStatus::Connecting) {
        set_status(
            shared,
            id,
            ServerStatus::Disconnected,
            StatusTrigger::Disconnect,
            Some("disconnected while the store could not record it".into()),
        )
        .await;
    }
}

/// Writes CONNECTED again when the store does not say so (the write made
/// at connect failed on a full disk).
async fn write_connected_again(shared: &Shared, id: ServerId, session: &Session) {
    let stored = shared.registry.get(&id.to_string()).await.ok();
    if stored.is_none_or(|r| r.status.is_available()) {
        return;
    }
    record_connected(shared, id, session).await;
}

/// CONNECTED, with the revision the session speaks.
async fn record_connected(shared: &Shared, id: ServerId, session: &Session) {
    let spoken = session.protocol_version().to_owned();
    set_status_with(
        shared,
        id,
        ServerStatus::Connected,
        StatusTrigger::ConnectSucceeded,
        Some(format!("protocol {spoken}")),
        |r| {
            r.error_message = None;
            r.protocol_version = Some(spoken);
        },
    )
    .await;
}

/// Carries out a command for a connected server; the outcome when it ends
/// the session.
async fn on_command(
    shared: &Shared,
    id: ServerId,
    name: &str,
    session: &Session,
    publish: &watch::Sender<Option<Arc<Session>>>,
    command: Option<Command>,
) -> Option<Connected> {
    match command {
        // Already connected: a connect that read an older status must not
        // leave callers waiting on a start that already happened.
        Some(Command::Connect) => {
            shared.started(id);
            None
        }
        // Carried out by the loop, which lists while answering commands.
        Some(Command::Relist) => None,
        Some(Command::Disconnect { force, reply }) => {
            let cut_off = if force {
                session.cancel_all("the server was disconnected")
            } else {
                let left = session.drain(shared.settings.drain_timeout).await;
                if left > 0 {
                    session.cancel_all("the server was disconnected before the call finished");
                }
                left
            };
            publish.send_replace(None);
            session.close().await;
            set_status(
                shared,
                id,
                ServerStatus::Disconnected,
                StatusTrigger::Disconnect,
                None,
            )
            .await;
            tracing::info!(server = %name, cut_off, "disconnected");
            let _ = reply.send(cut_off);
            Some(Connected::Disconnected)
        }
        Some(Command::Stop { reply }) => {
            stop_reply_close(shared, id, session, publish).await;
            let _ = reply.send(());
            Some(Connected::Stopped)
        }
        None => {
            stop_reply_close(shared, id, session, publish).await;
            Some(Connected::Stopped)
        }
    }
}

async fn stop_reply_close(
    shared: &Shared,
    id: ServerId,
    session: &Session,
    publish: &watch::Sender<Option<Arc<Session>>>,
) {
    session.cancel_all("the aggregator is shutting down");
    publish.send_replace(None);
    session.close().await;
    set_status(
        shared,
        id,
        ServerStatus::Disconnected,
        StatusTrigger::Disconnect,
        Some("stopped".into()),
    )
    .await;
}

struct StartedOnDrop(Arc<Shared>, ServerId);

impl Drop for StartedOnDrop {
    fn drop(&mut self) {
        self.0.started(self.1);
    }
}

enum Retry {
    Now,
    Disconnected,
    Stop,
}

/// Waits out the backoff delay; a connect request cuts it short, a
/// disconnect ends the retries.
async fn wait_before_retry(
    shared: &Shared,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    failures: usize,
    id: ServerId,
) -> Retry {
    let delay = shared.settings.retry_delay(failures);
    tokio::select! {
        () = tokio::time::sleep(delay) => Retry::Now,
        command = commands.recv() => while_waiting(shared, id, command, "retries stopped").await,
    }
}

/// A command that came while a server waited to connect again: a connect
/// tries now, a disconnect ends the waiting (`stopped` says what stopped).
async fn while_waiting(
    shared: &Shared,
    id: ServerId,
    command: Option<Command>,
    stopped: &str,
) -> Retry {
    match command {
        Some(Command::Connect) => Retry::Now,
        Some(Command::Relist) => Retry::Now,
        Some(Command::Disconnect { reply, .. }) => {
            set_status(
                shared,
                id,
                ServerStatus::Disconnected,
                StatusTrigger::Disconnect,
                Some(stopped.into()),
            )
            .await;
            let _ = reply.send(0);
            Retry::Disconnected
        }
        Some(Command::Stop { reply }) => {
            let _ = reply.send(());
            Retry::Stop
        }
        None => Retry::Stop,
    }
}

/// Waits for the server's login to finish (or for a command: a connect
/// tries again at once).
async fn wait_for_login(
    shared: &Shared,
    commands: &mut mpsc::UnboundedReceiver<Command>,
    auth: &crate::oauth::ServerAuth,
    id: ServerId,
) -> Retry {
    let mut logins = auth.logins();
    logins.mark_unchanged();
    // Logged in between the failure and now.
    if !auth.needs_login() {
        return Retry::Now;
    }
    tokio::select! {
        changed = logins.changed() => match changed {
            Ok(()) => Retry::Now,
            Err(_) => wait_before_retry(shared, commands, 0, id).await,
        },
        command = commands.recv() => while_waiting(shared, id, command, "waiting for a login stopped").await,
    }
}

async fn set_status(
    shared: &Shared,
    id: ServerId,
    to: ServerStatus,
    trigger: StatusTrigger,
    details: Option<String>,
) {
    set_status_with(shared, id, to, trigger, details, |_| {}).await;
}

async fn set_status_with(
    shared: &Shared,
    id: ServerId,
    to: ServerStatus,
    trigger: StatusTrigger,
    details: Option<String>,
    update: impl FnOnce(&mut ServerRecord) + Send + 'static,
) {
    let reason = details.clone();
    match shared
        .registry
        .transition(id, to, trigger, details, update)
        .await
    {
        Ok(_) => {
            if let Some(vitals) = shared.known_vitals(id) {
                vitals.status_changed(to, reason);
            }
        }
        Err(RegistryError::NotFound(_)) => {}
        Err(err) => tracing::error!(server = %id, "status change to {to} refused: {err}"),
    }
}

type CheckFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = (CheckOutcome, std::time::Duration)> + Send>,
>;

/// The health monitor of one connected session: a check is
/// due every interval; a server heard from since the last one passes
/// without being asked (passive inference), else it is checked actively,
/// off the supervisor's loop so calls and events never wait for a check.
struct Monitor {
    vitals: Arc<Vitals>,
    interval: std::time::Duration,
    timeout: std::time::Duration,
    next: tokio::time::Instant,
    /// `Vitals::mark` when the last check ended.
    since: u64,
    check: Option<CheckFuture>,
    status: ServerStatus,
}

impl Monitor {
    fn new(shared: &Shared, record: &ServerRecord, vitals: &Arc<Vitals>) -> Monitor {
        let interval = shared
            .settings
            .health
            .interval_for(record.health_check_interval_secs);
        Monitor {
            vitals: Arc::clone(vitals),
            interval,
            timeout: shared.settings.health.timeout,
            next: tokio::time::Instant::now() + interval,
            since: vitals.mark(),
            check: None,
            status: ServerStatus::Connected,
        }
    }

    /// The interval is over: a server heard from meanwhile has passed
    /// (returned, to be judged), else an active check starts.
    fn due(
        &mut self,
        shared: &Shared,
        session: &Arc<Session>,
        record: &ServerRecord,
    ) -> Option<CheckOutcome> {
        if self.vitals.heard_since(self.since) {
            return Some(CheckOutcome::Passed);
        }
        let session = Arc::clone(session);
        let http = shared.http.clone();
        let url = record.health_check_url.clone();
        let timeout = self.timeout;
        self.check = Some(Box::pin(async move {
            let started = std::time::Instant::now();
            let outcome = health::check(&session, &http, url.as_deref(), timeout).await;
            (outcome, started.elapsed())
        }));
        None
    }

    /// Applies the thresholds to a check's outcome; returns the reason to
    /// give up on the session when the server is to be marked ERROR.
    async fn judge(
        &mut self,
        shared: &Shared,
        id: ServerId,
        name: &str,
        outcome: CheckOutcome,
        took: Option<std::time::Duration>,
    ) -> Option<String> {
        self.since = self.vitals.mark();
        // A failure is confirmed (or cleared) sooner than the interval: a
        // hung server is ERROR within a few timeouts, while a healthy one
        // is asked no more often than the interval says.
        let wait = if matches!(outcome, CheckOutcome::Failed(_)) {
            self.timeout.min(self.interval)
        } else {
            self.interval
        };
        self.next = tokio::time::Instant::now() + wait;
        let failures = self.vitals.record_check(&outcome, took);
        let calls = self.vitals.call_trouble(&shared.settings.health.call_rules);
        let checked = chrono::Utc::now();
        match crate::model::health::judge(self.status, &outcome, failures, calls) {
            Verdict::Stay => None,
            Verdict::Warn(why) => {
                tracing::warn!(server = %name, "{why}");
                None
            }
            Verdict::Degrade(why) => {
                tracing::warn!(server = %name, "degraded: {why}");
                let message = why.clone();
                set_status_with(
                    shared,
                    id,
                    ServerStatus::Degraded,
                    StatusTrigger::HealthDegraded,
                    Some(why),
                    move |r| {
                        r.error_message = Some(message);
                        r.last_health_check = Some(checked);
                    },
                )
                .await;
                self.status = ServerStatus::Degraded;
                None
            }
            Verdict::Recover => {
                tracing::info!(server = %name, "recovered");
                set_status_with(
                    shared,
                    id,
                    ServerStatus::Connected,
                    StatusTrigger::HealthRecovered,
                    Some("health check passed".into()),
                    move |r| {
                        r.error_message = None;
                        r.last_health_check = Some(checked);
                    },
                )
                .await;
                self.status = ServerStatus::Connected;
                None
            }
            Verdict::Fail(why) => Some(why),
        }
    }
}

/// Opens the transport and runs the handshake, within the connect timeout.
/// From `RevisionId::Rev2026` it probes with `server/discover` and falls
/// back to `initialize` on the same link (the spec's compatibility
/// section); from `Rev2025` (a server that spoke 2025 last time) it goes
/// straight to
/// `initialize`, and if the server now refuses it (a JSON-RPC error, an
/// HTTP 4xx) it is probed at once on a fresh link — it may have been
/// upgraded to a 2026-07-28-only server.
async fn open_session(
    shared: &Shared,
    record: &ServerRecord,
    events: EventSender,
    first: RevisionId,
) -> Result<Arc<Session>, String> {
    let timeout = shared.settings.connect_timeout;
    let attempt = async {
        match open_in(shared, record, events.clone(), first).await {
            Err(Attempt::Refused(reason))
                if first == RevisionId::Rev2025
                    && !matches!(record.transport, Transport::Sse { .. }) =>
            {
                tracing::info!(server = %record.name, "the server refused initialize ({reason}); probing for 2026-07-28");
                open_in(shared, record, events, RevisionId::Rev2026)
                    .await
                    .map_err(|failed| match failed {
                        Attempt::Refused(later) => format!("{reason}; then {later}"),
                        Attempt::Failed(later) => later,
                    })
            }
            Err(Attempt::Refused(reason) | Attempt::Failed(reason)) => Err(reason),
            Ok(session) => Ok(session),
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer to initialize within {timeout:?}")),
    }
}

/// A session in the 2025 revisions beside the server's own (see
/// `legacy_session`), within the connect timeout; why not, when not.
pub(super) async fn open_legacy(
    shared: &Shared,
    record: &ServerRecord,
    events: EventSender,
) -> Result<Arc<Session>, String> {
    let timeout = shared.settings.connect_timeout;
    match tokio::time::timeout(
        timeout,
        open_in(shared, record, events, RevisionId::Rev2025),
    )
    .await
    {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(Attempt::Refused(reason) | Attempt::Failed(reason))) => Err(reason),
        Err(_) => Err(format!("no answer to initialize within {timeout:?}")),
    }
}

/// Why one handshake did not give a session.
enum Attempt {
    /// The server answered and refused this era's handshake.
    Refused(String),
    /// Anything else (no answer, the link broke, …).
    Failed(String),
}

/// One opening from one revision on a fresh link.
async fn open_in(
    shared: &Shared,
    record: &ServerRecord,
    events: EventSender,
    first: RevisionId,
) -> Result<Arc<Session>, Attempt> {
    let sealed = record.transport.sealed_values();
    if !sealed.is_empty() {
        return Err(Attempt::Failed(format!(
            "its stored {} cannot be decrypted: secret.key is not the key they were sealed \
             with (replaced or lost); restore it from a backup, or enter them again",
            sealed.join(", ")
        )));
    }
    let timeout = shared.settings.connect_timeout;
    // The 2024 HTTP+SSE transport predates the 2026-07-28 revision.
    let first = match record.transport {
        Transport::Sse { .. } => RevisionId::Rev2025,
        _ => first,
    };
    let (inbound_tx, inbound_rx) = inbound_channel();
    let name = record.name.as_str();
    let failed = |e: String| Attempt::Failed(e);
    let link = match &record.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let spec = stdio::StdioSpec {
                command,
                args,
                env,
                cwd: cwd.as_deref(),
            };
            Link::Stdio(stdio::open(name, &spec, inbound_tx).map_err(|e| failed(e.to_string()))?)
        }
        Transport::Http { base_url, headers } => {
            let auth = shared.oauth.get().and_then(|oauth| {
                oauth.for_server(record).map(|server| http::Authorizer {
                    oauth: Arc::clone(oauth),
                    server,
                })
            });
            Link::Http(
                http::open(
                    name,
                    shared.http.clone(),
                    base_url,
                    headers,
                    inbound_tx,
                    auth,
                    shared
                        .settings
                        .request_timeout
                        .max(shared.settings.connect_timeout),
                )
                .map_err(|e| failed(e.to_string()))?,
            )
        }
        Transport::Sse { url, headers } => Link::Sse(
            sse::open(name, shared.http.clone(), url, headers, inbound_tx, timeout)
                .await
                .map_err(|e| failed(e.to_string()))?,
        ),
    };
    let handshake = Handshake {
        first,
        connect_timeout: timeout,
        request_timeout: shared.settings.request_timeout,
        requests: shared
            .request_handler
            .read()
            .ok()
            .and_then(|h| h.clone())
            .map(|h| (record.id, h)),
        vitals: Some(shared.vitals(record)),
    };
    let opening = first.opening();
    Session::start(name, link, inbound_rx, events, handshake)
        .await
        .map_err(|err| match err {
            super::RpcError::Server { .. } => Attempt::Refused(format!("{opening}: {err}")),
            super::RpcError::Link(super::transport::LinkError::Status { status, .. })
                if (400..500).contains(&status) =>
            {
                Attempt::Refused(format!("{opening}: {err}"))
            }
            super::RpcError::Timeout(t) => {
                Attempt::Failed(format!("no answer to {opening} within {t:?}"))
            }
            // An answer that came and could not be read.
            super::RpcError::Link(super::transport::LinkError::Protocol(_)) => {
                Attempt::Failed(format!("{opening}: {err}"))
            }
            super::RpcError::Closed(_) | super::RpcError::Link(_) => {
                Attempt::Failed(format!("the server went away during the handshake: {err}"))
            }
            other => Attempt::Failed(other.to_string()),
        })
}
