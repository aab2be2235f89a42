"""Every REST endpoint under /api/ (DRF routers, trailing slashes)."""

from rest_framework.routers import DefaultRouter

from jobs.api import JobViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
urlpatterns = router.urls
