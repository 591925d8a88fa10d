from django.db import migrations, models


def chat_types_fill(apps, schema_editor):
    """A /schedule made before this field: a group when the bot has a workspace for its chat (every group a bot
    hears from has one, G2), else a DM (DMs never have one). Once, here; the code never infers it again."""
    Automation = apps.get_model("agents", "Automation")
    Workspace = apps.get_model("threadcontext", "Workspace")
    for automation in Automation.objects.exclude(created_by_open_id="").select_related("bot"):
        is_group = Workspace.objects.filter(bot_profile=automation.bot.slug, chat_id=automation.feishu_chat_id).exists()
        automation.feishu_chat_type = "group" if is_group else "p2p"
        automation.save(update_fields=["feishu_chat_type"])


class Migration(migrations.Migration):

    dependencies = [
        ("agents", "0024_turn_principal_bot_dm_policy"),
        ("threadcontext", "0011_i27b_contextitem_type_created"),
    ]

    operations = [
        migrations.AddField(
            model_name="automation",
            name="feishu_chat_type",
            field=models.CharField(
                blank=True, help_text="group or p2p for a /schedule (empty: made in the admin).", max_length=16
            ),
        ),
        migrations.RunPython(chat_types_fill, migrations.RunPython.noop),
    ]
