from django.contrib import admin

from apps.core.models import Notice


@admin.register(Notice)
class NoticeAdmin(admin.ModelAdmin):
    list_display = ["message", "level", "author", "created_at"]
    list_filter = ["level"]
    search_fields = ["message"]
