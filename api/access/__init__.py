"""Who may call the REST API: static bearer tokens (`tokens`), Kubernetes TokenReview and
SubjectAccessReview (`kubereviews`), and the guard every router depends on (`auth`)."""
