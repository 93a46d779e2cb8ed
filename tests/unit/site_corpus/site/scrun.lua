--[[
scrun.lua for a shared filesystem: nothing to copy, so each hook logs and succeeds.
]]

function slurm_scrun_stage_in(id, bundle, spool_dir, config_file, job_id, user_id,
                              group_id, job_env)
  slurm.log_info("stage_in: container %s, job %s, bundle %s, user %s:%s",
                 id, tostring(job_id), bundle, tostring(user_id), tostring(group_id))
  return slurm.SUCCESS
end

function slurm_scrun_stage_out(id, bundle, orig_bundle, root_path, orig_root_path,
                               spool_dir, config_file, job_id, user_id, group_id)
  slurm.log_info("stage_out: container %s, job %s, bundle %s, rootfs %s",
                 id, tostring(job_id), bundle, root_path)
  return slurm.SUCCESS
end

slurm.log_info("scrun.lua loaded on cluster %s", slurm.CLUSTER_NAME)
return slurm.SUCCESS
