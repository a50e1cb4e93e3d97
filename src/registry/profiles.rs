//! Profiles (views) in the registry: checked, stored, and announced
//! (`RegistryEvent::ProfileChanged`) so the router's views follow.

use super::{Registry, RegistryError, RegistryEvent, ValidationError};
use crate::model::Profile;

impl Registry {
    /// Every profile, by name.
    pub async fn profiles(&self) -> Result<Vec<Profile>, RegistryError> {
        self.blocking(|store| Ok(store.profiles()?)).await
    }

    pub async fn profile(&self, name: &str) -> Result<Profile, RegistryError> {
        let name = name.to_owned();
        self.blocking(move |store| {
            store
                .profiles()?
                .into_iter()
                .find(|p| p.name == name)
                .ok_or(RegistryError::ProfileNotFound(name))
        })
        .await
    }

    /// Stores a profile (added, or replacing the one of its name); whether
    /// it is new. An unchanged view is not written again.
    pub async fn put_profile(&self, profile: Profile) -> Result<bool, RegistryError> {
        let name = profile.name.clone();
        let (created, changed) = self
            .blocking(move |store| {
                // Compiles its patterns: a moment for a long list.
                profile
                    .validate()
                    .map_err(|err| ValidationError::new(err.field, err.message))?;
                let current = store
                    .profiles()?
                    .into_iter()
                    .find(|p| p.name == profile.name);
                if let Some(current) = &current
                    && current.same_view(&profile)
                    && current.source == profile.source
                {
                    return Ok((false, false));
                }
                let previous = store.put_profile(&profile)?;
                Ok((previous.is_none(), true))
            })
            .await?;
        if changed {
            tracing::info!(profile = %name, created, "profile stored");
            let _ = self.events.send(RegistryEvent::ProfileChanged { name });
        }
        Ok(created)
    }

    /// Removes a profile; the one removed. Tokens bound to it are left
    /// reaching nothing (a config file dropped it: the file wins).
    pub async fn remove_profile(&self, name: &str) -> Result<Profile, RegistryError> {
        self.remove_profile_if(name, false).await
    }

    /// Removes a profile no token is bound to (an admin's removal: the
    /// tokens are revoked first); the one removed.
    pub async fn remove_unbound_profile(&self, name: &str) -> Result<Profile, RegistryError> {
        self.remove_profile_if(name, true).await
    }

    async fn remove_profile_if(&self, name: &str, unbound: bool) -> Result<Profile, RegistryError> {
        let key = name.to_owned();
        let removed = self
            .blocking(move |store| {
                let removed = if unbound {
                    store.remove_unbound_profile(&key)?
                } else {
                    store.remove_profile(&key)?
                };
                removed.ok_or(RegistryError::ProfileNotFound(key))
            })
            .await?;
        tracing::info!(profile = %removed.name, "profile removed");
        let _ = self.events.send(RegistryEvent::ProfileChanged {
            name: removed.name.clone(),
        });
        Ok(removed)
    }
}
