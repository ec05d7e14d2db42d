//! Connections that are not members, per token: status and stop requests hold a connection
//! each (`dt-rdzv status --watch`, a dashboard), and one token may hold at most
//! [`MachineConfig::max_operator_connections`](super::super::MachineConfig::max_operator_connections)
//! of them, so that idle status connections on one job's token cannot fill the native door
//! for every job. Members are not counted: a job of 65,536 members is one token's too.

use super::super::ConnId;
use super::super::auth::Scope;
use super::super::error::Refusal;
use super::RendezvousMachine;

impl RendezvousMachine {
    /// Connection `conn`, not a member, was let in with `token` for `job` (`None`: the
    /// server's scope): counted against the token's bound the first time; past the bound it is
    /// refused and closed, naming it (`Err`: the caller answers nothing more).
    pub(super) fn operator(
        &mut self,
        conn: ConnId,
        job: Option<&str>,
        token: &str,
    ) -> Result<(), ()> {
        if self.conns.get(&conn).is_some_and(|c| c.operator.is_some()) {
            return Ok(());
        }
        // The server's token counts as the server's, whatever job it asks about.
        let scope = job
            .filter(|_| !self.authorized(Scope::Server, token))
            .map(str::to_owned);
        let held = self.operators.get(&scope).copied().unwrap_or(0);
        let max = self.config.max_operator_connections;
        if held >= max {
            let whose = scope.as_deref().map_or_else(
                || "the server's token".to_owned(),
                |j| format!("job {j:?}'s token"),
            );
            let why = format!(
                "{whose} holds {held} connections that are not members (status, stop), its \
                 limit (max_operator_connections, --max-operator-connections): close one, or \
                 ask on a connection already open"
            );
            self.refuse_and_close(
                conn,
                Refusal::BadRequest {
                    job: scope.unwrap_or_default(),
                    member: String::new(),
                    why,
                },
            );
            return Err(());
        }
        *self.operators.entry(scope.clone()).or_default() += 1;
        self.conns.entry(conn).or_default().operator = Some(scope);
        Ok(())
    }

    /// A connection counted by [`operator`](Self::operator) is gone.
    pub(super) fn operator_left(&mut self, scope: Option<String>) {
        if let Some(n) = self.operators.get_mut(&scope) {
            *n -= 1;
            if *n == 0 {
                self.operators.remove(&scope);
            }
        }
    }
}
