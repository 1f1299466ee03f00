//! Who a plugin acts as on the API server: the host itself, or a tenant's
//! ServiceAccount by impersonation.

/// A user the host impersonates for one plugin's writes, Events and uncached
/// reads (`Impersonate-User` and `Impersonate-Group`), so the API server's
/// RBAC bounds the plugin as well as its grant. Set by an embedder (a
/// namespaced `Handler`), never by a manifest's text.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    user: String,
    groups: Vec<String>,
}

impl Identity {
    /// The ServiceAccount `name` of `namespace`, with the groups
    /// kube-apiserver gives a ServiceAccount's token.
    #[must_use]
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_owned(),
            ],
        }
    }

    /// The user's name (`Impersonate-User`).
    #[must_use]
    pub fn user(&self) -> &str {
        &self.user
    }

    /// Its groups (one `Impersonate-Group` each).
    #[must_use]
    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    /// Adds the impersonation headers to `request`.
    ///
    /// # Errors
    ///
    /// When a name is not a valid header value (it holds a control
    /// character).
    pub fn impersonate<B>(&self, request: &mut http::Request<B>) -> Result<(), http::header::InvalidHeaderValue> {
        let headers = request.headers_mut();
        headers.insert("impersonate-user", http::HeaderValue::from_str(&self.user)?);
        for group in &self.groups {
            headers.append("impersonate-group", http::HeaderValue::from_str(group)?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_is_impersonated_with_the_groups_its_token_would_have() {
        let identity = Identity::service_account("shop", "handlers");
        let mut request = http::Request::new(());
        identity.impersonate(&mut request).unwrap();
        assert_eq!(
            request.headers()["impersonate-user"],
            "system:serviceaccount:shop:handlers"
        );
        let groups: Vec<_> = request.headers().get_all("impersonate-group").iter().collect();
        assert_eq!(
            groups,
            [
                "system:serviceaccounts",
                "system:serviceaccounts:shop",
                "system:authenticated"
            ]
        );
    }
}
