"""URLs of the operators' dashboard (staff only), mounted at /admin/dashboard/."""

urlpatterns: list = []
